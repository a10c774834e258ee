"""Base model of every config section."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    """Immutable, and unknown keys are errors."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)
