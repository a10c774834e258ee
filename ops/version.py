"""The version of ``hpray``: pyproject.toml's in a checkout, the installed distribution's otherwise."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def version() -> str:
    if PYPROJECT.is_file():
        return str(tomllib.loads(PYPROJECT.read_text())["project"]["version"])
    try:
        return importlib.metadata.version("hpray")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
