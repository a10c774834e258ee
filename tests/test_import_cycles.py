"""The project's import graph: no cycles, no arrow pointing up a layer, and every module imports
on its own. Every import counts: module level, ``if TYPE_CHECKING:`` and inside functions (a late
import inside a function only hides a cycle from Python's first import; the design still has it),
and so does the package ``__init__`` that importing ``a.b.c`` runs first (``a`` and ``a.b``)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (
    "artifacts",
    "config",
    "sizing",
    "workloads",
    "manifests",
    "constructs",
    "stacks",
    "docgen",
    "ops",
    "review",
    "bench",
    "rigs",
)
ENTRY_SCRIPTS = ("app",)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    modules = {name: ROOT / f"{name}.py" for name in ENTRY_SCRIPTS}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "_offline" not in path.parts:
                modules[_module_name(path)] = path
    return modules


def _parents(name: str) -> list[str]:
    """``a.b.c`` -> ``["a", "a.b"]``: the packages whose ``__init__`` importing it runs first."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    out: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from pkg import mod` imports the submodule when there is one.
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for t in targets:
            out |= {t, *_parents(t)}
    # Importing a module's own package is already under way when the module runs: no edge to it.
    own = {name, *_parents(name)}
    return {t for t in out if t in modules and t not in own}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_detector_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_type_checking_and_function_imports_count(tmp_path):
    # `if TYPE_CHECKING:` imports are still a cycle in the design (config/model.py and
    # config/inference.py had one), and so are imports inside functions (ops/jobs.py and
    # ops/driver_log.py had one).
    path = tmp_path / "m.py"
    path.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from config.model import X\n"
        "def f():\n    from config.loader import Y\n"
    )
    modules = {"config.model": path, "config.loader": path, "m": path}
    assert imports_of("m", path, modules) == {"config.model", "config.loader"}


def test_no_import_cycles_among_project_modules():
    modules = project_modules()
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    assert "config.environment" in graph["config.loader"]
    assert cycles(graph) == []


def test_shared_code_and_infrastructure_never_import_a_specific_workload():
    """Names and ports both sides need are facts in config/facts/names.py: the config, the constructs,
    the stacks, workloads/common and the shared renderers in manifests/ read them there, never
    from a workload's manifest or app (manifests/registry.py is where the workloads are named)."""
    modules = project_modules()
    shared_renderers = ("k8s", "rayjob", "security", "network_policy", "ha", "dashboards", "crd", "image")
    shared = ("config", "constructs", "stacks", "workloads.common", *(f"manifests.{m}" for m in shared_renderers))
    specific = ("workloads.inference", "workloads.training", "manifests.training", "manifests.inference")
    arrows = sorted(
        f"{name} -> {target}"
        for name, path in modules.items()
        if name in shared or name.startswith(tuple(f"{s}." for s in shared))
        for target in imports_of(name, path, modules)
        if target.startswith(specific)
    )
    assert arrows == []


def test_importing_a_submodule_counts_its_parent_packages(tmp_path):
    # `import a.b.c` runs a/__init__.py and a/b/__init__.py first: a cycle through a package's
    # __init__ is a cycle. A module's own packages are already being imported when it runs.
    a_init = tmp_path / "a_init.py"
    a_init.write_text("from a.x import X\n")
    x = tmp_path / "x.py"
    x.write_text("from b.y import Y\n")
    b_init = tmp_path / "b_init.py"
    b_init.write_text("")
    y = tmp_path / "y.py"
    y.write_text("from a.z import Z\n")
    z = tmp_path / "z.py"
    z.write_text("")
    modules = {"a": a_init, "a.x": x, "a.z": z, "b": b_init, "b.y": y}
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    assert graph["b.y"] == {"a", "a.z"}
    assert graph["a.x"] == {"b", "b.y"}  # not its own package `a`
    assert cycles(graph) == [["a", "a.x", "b.y"]]


# The layers, bottom to top. A module may import its own layer and any layer below it, never one
# above. config holds the facts and the config model (artifacts reads the pins in it); sizing is
# the plan over a config; workloads is the runtime shipped in the image and manifests the
# renderers; constructs and stacks the CDK app; app, review and ops the entry points (which may
# import anything below them); bench, rigs and docgen (the generated pages, one of which is the
# review's image table) sit on top.
LAYERS: dict[str, int] = {
    "config": 0,
    "artifacts": 1,
    "sizing": 2,
    "workloads": 3,
    "manifests": 3,
    "constructs": 4,
    "stacks": 5,
    "app": 6,
    "review": 6,
    "ops": 6,
    "bench": 7,
    "rigs": 7,
    "docgen": 7,
}
# Imports forbidden beside the layer order: the entry points stand beside each other, the
# renderers never import the runtime the other way, and the runtime (shipped in the container
# image whole) imports only the config and itself.
FORBIDDEN: dict[str, set[str]] = {
    "review": {"ops", "app"},
    "ops": {"review", "app"},
    "app": {"review", "ops"},
    "workloads": set(LAYERS) - {"config", "workloads"},
}


def _top(name: str) -> str:
    return name.split(".")[0]


def upward_arrows(graph: dict[str, set[str]]) -> list[str]:
    """Every import that points up a layer or is forbidden, as ``module -> target``."""
    return sorted(
        f"{name} -> {target}"
        for name, targets in graph.items()
        for target in targets
        if LAYERS[_top(target)] > LAYERS[_top(name)] or _top(target) in FORBIDDEN.get(_top(name), set())
    )


def test_every_package_has_a_layer():
    assert set(LAYERS) == set(PACKAGES) | set(ENTRY_SCRIPTS)


def test_the_layer_check_names_each_upward_arrow():
    graph = {"config.a": {"sizing.b"}, "sizing.b": {"config.a"}, "ops.x": {"review.y"}, "workloads.w": {"sizing.b"}}
    assert upward_arrows(graph) == ["config.a -> sizing.b", "ops.x -> review.y", "workloads.w -> sizing.b"]


def test_no_import_points_up_a_layer():
    modules = project_modules()
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    arrows = upward_arrows(graph)
    assert arrows == []


# Imports each module named on stdin, one at a time, each after dropping every project module
# from sys.modules (what lies under the checkout; third-party libraries stay loaded, so the
# heavy ones load once) and putting back the import machinery as it was at the start (a rig
# installs an import finder). Prints one JSON line per module that fails.
_IMPORT_EACH = r"""
import importlib, json, sys, traceback
root = sys.argv[1]
meta_path, path, path_hooks = list(sys.meta_path), list(sys.path), list(sys.path_hooks)
def project(m):
    f = getattr(m, "__file__", None) or ""
    return f.startswith(root) and "/.venv" not in f
for name in sys.stdin.read().split():
    for key in [k for k, m in list(sys.modules.items()) if project(m)]:
        del sys.modules[key]
    sys.meta_path[:], sys.path[:], sys.path_hooks[:] = meta_path, path, path_hooks
    sys.path_importer_cache.clear()
    try:
        importlib.import_module(name)
    except BaseException as err:
        line = traceback.format_exception_only(type(err), err)[-1].strip()
        print(json.dumps({"module": name, "error": line}), flush=True)
"""


def test_every_module_imports_on_its_own():
    """``python -c "import sizing.plan"`` must work as it does after ``import config``: each module
    imports from nothing of the project loaded (a cycle that works only in one order fails here)."""
    import json
    import os
    import subprocess
    import sys

    names = sorted(project_modules())  # every __main__ runs its main() only under `python -m`
    workers = 2
    env = {**os.environ, "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _IMPORT_EACH, str(ROOT) + os.sep],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(workers)
    ]
    failures = []
    outs = [p.communicate("\n".join(names[i::workers]), timeout=300) for i, p in enumerate(procs)]
    for proc, (out, err) in zip(procs, outs, strict=True):
        assert proc.returncode == 0, err[-2000:]
        failures += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert failures == []
