"""Each foundation-model data module imports on its own, in a fresh interpreter, and imports
nothing of the project beyond ``workloads`` and ``config`` (the image's runtime packages)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
MODULES = [
    "workloads.common.tokenizer",
    "workloads.common.token_shards",
    "workloads.common.token_windows",
    "workloads.common.loss",
    "workloads.pretokenize",
    "workloads.pretokenize.inputs",
    "workloads.pretokenize.pipeline",
    "workloads.pretokenize.__main__",
]


@pytest.mark.parametrize("module", MODULES)
def test_imports_on_its_own_and_only_runtime_packages(module):
    code = (
        f"import sys, importlib; importlib.import_module({module!r}); "
        "print(sorted({m.split('.')[0] for m in sys.modules if m.split('.')[0] in "
        "('bench', 'tests', 'rigs', 'ops', 'sizing', 'stacks', 'review', 'artifacts')}))"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
