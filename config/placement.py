"""Placement: every pod the platform runs fits the node pool it selects (filled in below)."""

from __future__ import annotations


def check_against(env) -> list[str]:
    return []
