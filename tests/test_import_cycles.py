"""No import cycles among the project's own modules. Every import counts: module level,
``if TYPE_CHECKING:`` and inside functions. A late import inside a function only hides a cycle
from Python's first import; the design still has it."""

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
    "ops",
    "review",
    "bench",
    "rigs",
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "_offline" not in path.parts:
                modules[_module_name(path)] = path
    return modules


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
        out |= {t for t in targets if t in modules and t != name}
    return out


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
    """Names and ports both sides need are facts in config/names.py: the config, the constructs,
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
