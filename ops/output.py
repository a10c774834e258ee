"""Human tables by default, JSON for pipelines (``--json``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def table(columns: Sequence[str], rows: Sequence[Sequence[Any]], *, indent: str = "") -> str:
    """A plain fixed-width table: header, rule, one line per row (cells may be multi-line)."""
    text_rows = [[_cell(v) for v in row] for row in rows]
    widths = [len(c) for c in columns]
    for row in text_rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], *(len(part) for part in cell.split("\n")))
    lines = [indent + "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines.append(indent + "  ".join("-" * w for w in widths))
    for row in text_rows:
        parts = [cell.split("\n") for cell in row]
        height = max(len(p) for p in parts)
        for k in range(height):
            line = "  ".join((p[k] if k < len(p) else "").ljust(w) for p, w in zip(parts, widths, strict=False))
            lines.append(indent + line.rstrip())
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def to_json(data: Any, *, compact: bool = False) -> str:
    """Stable JSON: sorted keys, datetimes as ISO strings; ``compact`` for one line (JSON Lines)."""
    if compact:
        return json.dumps(data, sort_keys=True, default=_default, separators=(",", ":"))
    return json.dumps(data, indent=2, sort_keys=True, default=_default)


def _default(value: Any) -> Any:
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, (set, frozenset, tuple)):
        return sorted(value)
    return str(value)
