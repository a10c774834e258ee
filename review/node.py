"""Keep jsii's Node.js banners off the output of ``python -m review``.

review/flows.py imports the CDK's ``constructs`` library, which starts jsii, and jsii prints a
multi-line banner when the Node.js it runs on is end-of-life, deprecated or untested. ``make``
runs it on the pinned Node 22 of ``node_modules/`` and silences the rest (Makefile); this does
the same for the command run by hand: the pinned Node first on PATH when the checkout has it, and
the banner of whichever Node then runs silenced. No CDK import here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
END_OF_LIFE = "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"
QUIET = ("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION")


def node_major(node: str) -> str | None:
    try:
        done = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    major = done.stdout.strip().lstrip("v").split(".")[0]
    return major if major.isdigit() else None


def quiet_jsii(environ: dict[str, str] | os._Environ[str] = os.environ, root: Path = ROOT) -> None:
    """Set ``environ`` (before jsii starts) so that jsii runs on the pinned Node if there and prints no banner."""
    pinned = root / "node_modules" / ".bin"
    if (pinned / "node").exists():
        environ["PATH"] = f"{pinned}{os.pathsep}{environ.get('PATH', '')}"
    for name in QUIET:
        environ.setdefault(name, "1")
    node = shutil.which("node", path=environ.get("PATH"))
    major = node_major(node) if node else None
    silenced = [v.strip() for v in environ.get(END_OF_LIFE, "").split(",") if v.strip()]
    if major and major not in silenced:
        environ[END_OF_LIFE] = ",".join([*silenced, major])
