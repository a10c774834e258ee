"""config/observability.py: defaults, per-environment values and invalid values with exact messages."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from config import load_environment, parse_environment
from config.observability import Observability
from tests.config.config_data import config_errors, env_data


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


def test_scrape_interval_is_the_managed_collectors_minimum_at_least():
    """AMP's managed collector refuses scrape intervals under 30 s."""
    assert config_errors("dev", lambda d: d["observability"].update(scrape_interval_seconds=29)) == [
        "observability.scrape_interval_seconds: Input should be greater than or equal to 30 (given: 29)"
    ]
    assert Observability(scrape_interval_seconds=30).scrape_interval_seconds == 30


def test_alarm_https_endpoints_are_https_urls_and_deduplicated():
    assert config_errors(
        "dev", lambda d: d["observability"].update(alarm_https_endpoints=["http://paging.example.com/sns"])
    ) == [
        "observability.alarm_https_endpoints: 'http://paging.example.com/sns': not an HTTPS URL; expected "
        "https://host/path (Amazon SNS delivers to HTTPS endpoints only)"
    ]
    url = "https://paging.example.com/integrations/sns/x"
    assert Observability(alarm_https_endpoints=[url, url]).alarm_https_endpoints == [url]


def test_production_needs_an_alarm_subscriber():
    def no_subscriber(d):
        d["observability"].pop("alarm_emails")
        d["observability"].pop("alarm_https_endpoints")

    assert config_errors("prod", no_subscriber) == [
        "observability.alarm_emails: a production environment needs at least one alarm subscriber; "
        "list an email address here or an HTTPS endpoint in observability.alarm_https_endpoints"
    ]

    # Either kind of subscriber is enough.
    def https_only(d):
        d["observability"].pop("alarm_emails")

    assert load_environment("prod").observability.alarm_emails
    data = env_data("prod")
    https_only(data)
    assert parse_environment(data, source="prod.yaml").observability.alarm_https_endpoints
    # Outside production the topic may wait for subscribers.
    assert not load_environment("dev").observability.alarm_emails


@pytest.mark.parametrize("env", ["staging", "prod"])
def test_staging_and_prod_name_subscribers(env):
    obs = load_environment(env).observability
    assert obs.alarm_emails or obs.alarm_https_endpoints


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "observability.training_goodput_min: Input should be greater than 0 (given: 0)"),
        (1, "observability.training_goodput_min: Input should be less than 1 (given: 1)"),
    ],
)
def test_training_goodput_min_is_a_fraction(value, message):
    assert config_errors("dev", lambda d: d["observability"].update(training_goodput_min=value)) == [message]
    assert Observability().training_goodput_min == 0.7
