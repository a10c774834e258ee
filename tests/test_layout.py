"""The repo-root `constructs/` folder must not shadow the `constructs` library."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_constructs_folder_has_no_init():
    assert (ROOT / "constructs").is_dir()
    assert not (ROOT / "constructs" / "__init__.py").exists(), (
        "constructs/__init__.py shadows the CDK 'constructs' library and breaks every import"
    )


def test_library_and_project_modules_both_import():
    code = (
        "import constructs, constructs.network, constructs.storage;"
        "from constructs import Construct;"
        "print(Construct.__module__)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().startswith("constructs")


def test_top_level_layout():
    for name in [
        "app.py",
        "cdk.json",
        "stacks",
        "constructs",
        "lifecycle_scripts",
        "tests",
        "workloads",
        "manifests",
        "README.md",
        "config",
        "bench",
        "rigs",
        ".ci/run",
    ]:
        assert (ROOT / name).exists(), name


def test_long_modules_say_why_they_are_one():
    """A source module over ~400 lines states in its docstring why it is one module (issue 22)."""
    import ast
    import re

    dirs = (
        "app.py",
        "artifacts",
        "config",
        "sizing",
        "constructs",
        "stacks",
        "review",
        "ops",
        "docgen",
        "workloads",
        "manifests",
        "rigs",
        "bench",
        "lifecycle_scripts",
    )
    files = [p for d in dirs for p in ([ROOT / d] if d.endswith(".py") else sorted((ROOT / d).rglob("*.py")))]
    silent = []
    for path in files:
        text = path.read_text()
        if text.count("\n") <= 420:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        if not re.search(r"\bone (module|file)\b|\bstays one\b", doc, re.IGNORECASE):
            silent.append(f"{path.relative_to(ROOT)} ({text.count(chr(10))} lines)")
    assert silent == [], silent
