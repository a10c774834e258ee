"""app.py's start: one thread talks to the jsii kernel while the other imports Python modules.

The kernel (jsii's Node process) answers one request at a time over one pipe; two threads
writing to it at once would interleave their requests. app.py may overlap the kernel's work with
the imports only because the modules it imports meanwhile make no kernel call, and because the
kernel thread imports no module of aws-cdk-lib's services while the main thread imports them:
these tests hold its two lists to the first, and run its start to see that every request came
from the kernel thread and which thread imported what. The last one holds the App props' missing
construct tree to its reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(*pieces: str, env: dict[str, str] | None = None) -> dict:
    """Run the pieces of code, one after the other, in a fresh interpreter at the repository
    root (with ``env`` added to the environment); the last prints one JSON line."""
    proc = subprocess.run(
        [sys.executable, "-c", "\n".join(textwrap.dedent(piece) for piece in pieces)],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# Records each kernel request with the thread that sent it.
SPY = """
import threading
import jsii._kernel.providers.process as process

SENT = []
_send = process._NodeProcess.send


def send(self, request, response_type):
    name = getattr(request, "fqn", "") or getattr(request, "name", "") or getattr(request, "method", "") or getattr(request, "property", "")
    SENT.append((threading.current_thread().name, type(request).__name__, name))
    return _send(self, request, response_type)


process._NodeProcess.send = send
"""


def test_the_config_modules_import_no_jsii_package():
    result = _run(
        """
        import importlib, json, sys
        import app
        for name in app.CONFIG_MODULES:
            importlib.import_module(name)
        jsii = sorted(m for m in sys.modules if m.split(".")[0] in ("jsii", "aws_cdk", "cdk_nag") or m == "constructs._jsii")
        print(json.dumps({"jsii": jsii}))
        """
    )
    assert result == {"jsii": []}


def test_the_platform_modules_make_no_kernel_call_at_import():
    result = _run(
        """
        import importlib, json
        import aws_cdk
        import app
        """,
        SPY,
        """
        for name in app.PLATFORM_MODULES:
            importlib.import_module(name)
        print(json.dumps({"sent": SENT}))
        """,
    )
    assert result == {"sent": []}


def test_the_spy_sees_a_module_level_kernel_call(tmp_path):
    """The spy above is what the test before trusts: a module that calls the kernel at import
    (as constructs/network.py once did with its Lustre ports) shows up in it."""
    (tmp_path / "calls_at_import.py").write_text("from aws_cdk import aws_ec2 as ec2\nPORT = ec2.Port.tcp(988)\n")
    result = _run(
        """
        import json, sys
        import aws_cdk
        """,
        SPY,
        f"""
        sys.path.insert(0, {str(tmp_path)!r})
        import calls_at_import
        print(json.dumps({{"sent": SENT}}))
        """,
    )
    assert result == {"sent": [["MainThread", "StaticInvokeRequest", "aws-cdk-lib.aws_ec2.Port"]]}


def test_every_kernel_request_of_the_start_comes_from_the_kernel_thread():
    result = _run(
        """
        import json
        import app
        """,
        SPY,
        """
        started, config = app.start_app(app.load_selected)
        print(json.dumps({"sent": SENT, "app": type(started).__name__, "env": config.name}))
        """,
    )
    # The App and its context come from the kernel thread, the config (dev: no env in the
    # context) from this one, with no kernel call.
    assert result["app"] == "App" and result["env"] == "dev"
    threads = {thread for thread, _, _ in result["sent"]}
    assert threads == {"jsii-kernel_0"}, result["sent"]
    loads = [name for _, kind, name in result["sent"] if kind == "LoadRequest"]
    # aws-cdk-lib (after the assemblies it depends on), then cdk-nag.
    assert loads[-2:] == ["aws-cdk-lib", "cdk-nag"]
    assert ("jsii-kernel_0", "CreateRequest", "aws-cdk-lib.App") in [tuple(s) for s in result["sent"]]


# Which thread first imports each module, from the first import of app on.
IMPORTS = """
import importlib.abc, sys, threading

FIRST = {}


class Tracer(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        FIRST.setdefault(name, threading.current_thread().name)
        return None


sys.meta_path.insert(0, Tracer())
"""


def test_the_kernel_thread_imports_no_aws_service_module():
    """aws-cdk-lib's service modules import each other (a class of aws_lambda names aws_ec2's
    IConnectable). Were the kernel thread to import one while the main thread imports the
    platform, each thread could hold a module the other waits for, and Python hands one of them
    a half-made module: an AttributeError at random (it happened, once, when the kernel thread
    also preloaded the kubectl layer, whose module imports aws_lambda)."""
    result = _run(
        IMPORTS,
        """
        import json
        import app

        app.start_app(app.load_selected)
        print(json.dumps({"kernel": sorted(m for m, t in FIRST.items() if t != "MainThread")}))
        """,
    )
    services = [m for m in result["kernel"] if m.startswith(("aws_cdk.aws_", "aws_cdk.lambda_layer_"))]
    # The platform's modules; `constructs` itself (and constructs._jsii) is the jsii library.
    platform = [
        m
        for m in result["kernel"]
        if m.split(".")[0] in ("config", "sizing", "manifests", "stacks")
        or (m.startswith("constructs.") and not m.startswith("constructs._"))
    ]
    assert services == [] and platform == [], result["kernel"]
    assert "aws_cdk" in result["kernel"] and "cdk_nag" in result["kernel"]


def test_the_import_tracer_sees_a_service_module_imported_on_the_kernel_thread():
    """The tracer above is what the test before trusts."""
    result = _run(
        IMPORTS,
        """
        import json
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="jsii-kernel") as kernel:
            kernel.submit(__import__, "aws_cdk.lambda_layer_kubectl_v34").result()
        print(json.dumps({"kernel": sorted(m for m, t in FIRST.items() if t != "MainThread")}))
        """,
    )
    assert "aws_cdk.aws_lambda" in result["kernel"] and "aws_cdk.lambda_layer_kubectl_v34" in result["kernel"]


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"env": "qa"}, "unknown environment 'qa'; known environments: dev, prod, staging"),
        ({"pipeline": "maybe"}, "pipeline: 'maybe' is not a switch; allowed: true or false"),
    ],
)
def test_a_config_error_is_one_message_and_exit_1_while_the_kernel_thread_loads(tmp_path, context, message):
    """The config loads on the main thread while the kernel thread still loads cdk-nag and the
    kubectl layer: an error there waits for that thread, then exits 1 with the one message."""
    cdk_context = json.loads((ROOT / "cdk.json").read_text())["context"]
    proc = subprocess.run(
        [sys.executable, "app.py"],
        cwd=ROOT,
        env={**os.environ, "CDK_OUTDIR": str(tmp_path), "CDK_CONTEXT_JSON": json.dumps(cdk_context | context)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert message in proc.stderr
    assert not list(tmp_path.glob("*.json"))


# start_app with a load that records the contexts it was run on.
COUNTED_START = """
import json
import app

RUNS = []


def load(context):
    RUNS.append(context.env)
    return app.load_selected(context)


started, config = app.start_app(load)
print(json.dumps({"runs": RUNS, "env": config.name}))
"""


def test_the_config_loads_once_from_the_clis_context_before_the_app_exists():
    result = _run(COUNTED_START, env={"CDK_CONTEXT_JSON": json.dumps({"env": "staging"})})
    assert result == {"runs": ["staging"], "env": "staging"}


def test_without_the_clis_context_the_config_loads_from_the_apps():
    environ = {k: v for k, v in os.environ.items() if k != "CDK_CONTEXT_JSON"}
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(COUNTED_START)], cwd=ROOT, env=environ, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"runs": [None], "env": "dev"}


def test_the_apps_context_wins_where_the_cli_wrote_part_of_it_to_a_file(tmp_path):
    """The CLI writes a large context to a file the App reads after CDK_CONTEXT_JSON: the early
    load (dev) is dropped and the config loads again from the App's context (staging)."""
    overflow = tmp_path / "context.json"
    overflow.write_text(json.dumps({"env": "staging"}))
    result = _run(
        COUNTED_START,
        env={"CDK_CONTEXT_JSON": json.dumps({"env": "dev"}), "CONTEXT_OVERFLOW_LOCATION_ENV": str(overflow)},
    )
    assert result == {"runs": ["dev", "staging"], "env": "staging"}


def test_the_assembly_has_no_construct_tree_while_nothing_reads_one(synthesized):
    """tree.json is left out (APP_PROPS) because no reader of it is on: the CDK CLI reads it for
    its notices and its telemetry only, and cdk.json turns both off. Turning either on needs the
    tree back."""
    assembly, _, _ = synthesized("dev")
    directory = Path(assembly.directory)
    manifest = json.loads((directory / "manifest.json").read_text())
    assert not (directory / "tree.json").exists()
    assert [name for name, art in manifest["artifacts"].items() if art["type"] == "cdk:tree"] == []
    settings = json.loads((ROOT / "cdk.json").read_text())
    readers_on = {
        "notices": settings.get("notices", True),
        "context cli-telemetry": settings["context"].get("cli-telemetry", True),
    }
    assert readers_on == {"notices": False, "context cli-telemetry": False}, (
        "the CDK CLI reads tree.json for these: set tree_metadata back to True in app.py's APP_PROPS"
    )
