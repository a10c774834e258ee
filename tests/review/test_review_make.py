"""The make wiring: `make synth` ends with the review; COMPARE=PATH / COMPARE=last reach it."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _dry(*args: str) -> str:
    proc = subprocess.run(
        ["make", "-n", "--no-print-directory", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_synth_runs_gates_then_review():
    out = _dry("synth")
    assert out.index("cdk synth --quiet -c env=dev") < out.index("gates") < out.index("review")
    # The placement table of the environment, right after synth (sizing/placement.py).
    assert (
        out.index("cdk synth --quiet -c env=dev")
        < out.index(".venv/bin/python -m manifests check dev")
        < out.index("gates")
    )


def test_review_compare_variable():
    assert ".venv/bin/python -m review cdk.out --compare /tmp/old-cdk-out" in _dry("review", "COMPARE=/tmp/old-cdk-out")
    assert ".venv/bin/python -m review cdk.out --compare .cdk.out.previous" in _dry("review", "COMPARE=last")
    plain = _dry("review")
    assert ".venv/bin/python -m review cdk.out" in plain and "--compare" not in plain
