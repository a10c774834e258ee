"""config/observability.py: defaults, per-environment values and invalid values with exact messages."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from config import load_environment
from config.observability import Observability


@pytest.mark.parametrize(("env", "days"), [("dev", 30), ("staging", 90), ("prod", 365)])
def test_each_environment_keeps_container_logs_and_ships_them(env, days):
    cfg = load_environment(env)
    assert cfg.observability.log_retention_days == days
    # Ray's logs reach CloudWatch only through the add-on's Fluent Bit.
    assert cfg.eks.cloudwatch_observability


def test_retention_must_be_a_cloudwatch_period():
    with pytest.raises(ValidationError) as err:
        Observability(log_retention_days=31)
    assert "31 is not a CloudWatch Logs retention period; allowed: 1, 3, 5, 7, 14, 30, 60, 90" in str(err.value)


def test_alarm_emails_are_addresses_and_deduplicated():
    with pytest.raises(ValidationError) as err:
        Observability(alarm_emails=["ops@example.com", "not-an-address"])
    assert "'not-an-address': not an email address; expected name@example.com" in str(err.value)
    assert Observability(alarm_emails=["a@example.com", "a@example.com"]).alarm_emails == ["a@example.com"]


@pytest.mark.parametrize("ratio", [0, 1, 1.5])
def test_serve_error_ratio_is_a_fraction(ratio):
    with pytest.raises(ValidationError, match="serve_error_ratio"):
        Observability(serve_error_ratio=ratio)
