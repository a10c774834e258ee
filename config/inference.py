"""The `inference:` section: the Ray Serve app (owned by the inference workload)."""

from __future__ import annotations

from config.base import Frozen


class Inference(Frozen):
    """Placeholder: the inference workload issue fills this in."""
