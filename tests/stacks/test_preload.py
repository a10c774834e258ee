"""stacks/preload.py: what app.py imports on a second thread must never talk to the jsii kernel
(its pipe is not thread-safe), and the list must keep up with what the stacks import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stacks.preload import CONFIG_MODULES, SERVICE_MODULES, import_in_background

ROOT = Path(__file__).resolve().parents[2]


def run_fresh(*code: str) -> dict:
    """Run the ``code`` blocks in a fresh interpreter (nothing imported yet) and return the JSON
    it prints."""
    proc = subprocess.run(
        [sys.executable, "-c", "".join(textwrap.dedent(block) for block in code)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1", "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_background_modules_send_nothing_to_the_kernel():
    sent = run_fresh(f"""
        import json
        import jsii._kernel.providers.process as process
        requests = []
        send = process._NodeProcess.send
        process._NodeProcess.send = lambda self, request, response_type: (
            requests.append(type(request).__name__), send(self, request, response_type))[1]
        import importlib
        for name in {CONFIG_MODULES!r}:
            importlib.import_module(name)
        before_aws_cdk = list(requests)
        import aws_cdk
        started = len(requests)
        for name in {SERVICE_MODULES!r}:
            importlib.import_module(name)
        print(json.dumps({{"config": before_aws_cdk, "aws_cdk": started, "services": requests[started:]}}))
    """)
    assert sent["config"] == []
    assert sent["aws_cdk"] > 0  # the patch does see the kernel's traffic
    assert sent["services"] == []


NEW_SERVICE_MODULES = """
    import sys

    def new_service_modules(before):
        # aws_cdk.<service>, without the packages that have an assembly of their own (the kubectl
        # layer, the asset layers): importing those loads it into the kernel.
        new = set(sys.modules) - before
        return sorted(m for m in new if m.count(".") == 1 and m.startswith("aws_cdk.") and m + "._jsii" not in new)
"""


def test_service_modules_are_the_ones_the_stacks_import():
    """Once the listed modules are imported, importing the stacks pulls in no other service
    module; and every listed one is one the stacks import (none is stale)."""
    preloaded = run_fresh(
        NEW_SERVICE_MODULES,
        f"""
        import importlib, json, sys
        import aws_cdk
        for name in {SERVICE_MODULES!r}:
            importlib.import_module(name)
        before = set(sys.modules)
        import stacks.platform
        print(json.dumps(new_service_modules(before)))
    """,
    )
    assert preloaded == []
    by_the_stacks = run_fresh(
        NEW_SERVICE_MODULES,
        """
        import json, sys
        import aws_cdk
        before = set(sys.modules)
        import stacks.platform
        print(json.dumps(new_service_modules(before)))
    """,
    )
    assert set(SERVICE_MODULES) <= set(by_the_stacks)


def test_a_failed_background_import_is_left_to_the_import_that_needs_it(capsys):
    import_in_background(("no_such_module_for_preload",)).join(timeout=30)
    assert capsys.readouterr().err == ""
    with pytest.raises(ModuleNotFoundError, match="no_such_module_for_preload"):
        import no_such_module_for_preload  # noqa: F401
