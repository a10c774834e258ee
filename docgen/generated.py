"""Files generated from code and committed (the schemas and the reference pages): write them, or
with ``--check`` write nothing and name each one that differs from what the code generates now."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path


def write_or_check(files: Mapping[Path, str], *, root: Path, check: bool, hint: str) -> int:
    """Write each of ``files`` (``wrote PATH``, PATH relative to ``root``) and return 0; with
    ``check``, print ``stale: PATH`` and ``hint`` on stderr for each file that is missing or
    differs, and return 1 when any does."""
    if check:
        stale = [p for p, text in files.items() if not p.exists() or p.read_text() != text]
        for path in stale:
            print(f"stale: {path.relative_to(root)}{hint}", file=sys.stderr)
        return 1 if stale else 0
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path.relative_to(root)}")
    return 0
