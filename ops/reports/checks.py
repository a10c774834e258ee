"""One row of a readiness check (``preflight``, and the image checks ``status`` shares) and the
guard that turns an AWS error into that check's FAIL row."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from ops.errors import CredentialsError, OpsError

PASS, WARN, FAIL = "PASS", "WARN", "FAIL"


@dataclass(frozen=True)
class Check:
    check: str
    status: str  # PASS, WARN or FAIL
    detail: str
    fix: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def guarded(label: str, fn: Callable[[], list[Check] | Check]) -> list[Check]:
    """Run one check; an AWS error becomes that check's FAIL row (missing credentials stop all)."""
    try:
        result = fn()
    except CredentialsError:
        raise
    except OpsError as err:
        return [Check(label, FAIL, err.message, err.fix)]
    return result if isinstance(result, list) else [result]
