"""The `training:` section: the Ray Train job (owned by the training workload)."""

from __future__ import annotations

from config.base import Frozen


class Training(Frozen):
    """Placeholder: the training workload issue fills this in."""
