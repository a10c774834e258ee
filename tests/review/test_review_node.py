"""`python -m review`, which docs/review.md tells users to run, prints no jsii banner about the
Node.js release: not with the checkout's pinned Node, not with the machine's own."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from review import node

ROOT = Path(__file__).resolve().parents[2]
BANNER = ("!!!!", "end-of-life", "has reached", "not been tested", "Node ")


def _clean_env(path: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JSII_")}
    env["PATH"] = path
    return env


def _without_node_modules(path: str) -> str:
    return os.pathsep.join(p for p in path.split(os.pathsep) if "node_modules" not in p)


def test_the_documented_command_prints_no_banner():
    """As a user runs it: no JSII_* variable set, node_modules/.bin not on PATH."""
    env = _clean_env(_without_node_modules(os.environ["PATH"]))
    result = subprocess.run(
        [sys.executable, "-m", "review", "--help"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: python -m review")
    assert result.stderr == ""


def test_the_machines_own_node_is_silenced_too(tmp_path):
    """A checkout without node_modules/: jsii starts on the machine's node, whatever its release."""
    path = _without_node_modules(os.environ["PATH"])
    assert shutil.which("node", path=path), "make's `npm ci` runs on the machine's node, so there is one"
    env = _clean_env(path)
    program = (
        "from pathlib import Path\n"
        "from review.node import quiet_jsii\n"
        f"quiet_jsii(root=Path({str(tmp_path)!r}))\n"
        "import constructs\n"  # starts jsii, as review/flows.py does
        "constructs.Construct\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert not [line for line in (result.stdout + result.stderr).splitlines() if any(b in line for b in BANNER)]


def test_the_end_of_life_list_keeps_what_was_set(tmp_path):
    environ = {"PATH": _without_node_modules(os.environ["PATH"]), node.END_OF_LIFE: "18"}
    machine = shutil.which("node", path=environ["PATH"])
    node.quiet_jsii(environ, root=tmp_path)
    major = node.node_major(machine) if machine else None
    assert environ[node.END_OF_LIFE] == ("18" if major in (None, "18") else f"18,{major}")
    assert all(environ[name] == "1" for name in node.QUIET)
