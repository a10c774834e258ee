"""Checks of what ``network.images_from_ecr`` needs from the operator, shared by ``preflight``
(before the HyperPod stack) and ``status`` (after the deploy).

The one step no deploy can do: the Docker Hub user and access token the Docker Hub pull-through
cache rule signs in with, in the secret ``network.docker_hub_credential_secret_arn`` names. Every
other image source is filled by the deploy itself (review/images.py lists them). These checks:

- the secret exists and its value is JSON with a non-empty ``username`` and ``accessToken``
  (never printed);
- each pull-through cache rule of the environment exists (the cluster stack creates it) and ECR
  validates it against its upstream (``ecr:ValidatePullThroughCacheRule``: for Docker Hub this
  signs in with the secret).

Every failure carries the command that fixes it. ``evaluate_*`` are pure; ``image_checks`` calls AWS.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from config import versions
from ops.errors import NotFoundError
from ops.reports.checks import FAIL, PASS, Check, guarded

if TYPE_CHECKING:
    from config.environment import EnvironmentConfig
    from ops.clients.aws import Aws

_SUFFIX = re.compile(r"-[A-Za-z0-9]{6}$")


def expected_rules(config: EnvironmentConfig) -> list[versions.PullThroughCache]:
    """The pull-through cache rules the cluster stack creates for ``config`` (constructs/image_cache.py)."""
    if not config.network.images_from_ecr:
        return []
    return [
        c
        for c in versions.PULL_THROUGH_CACHES
        if not c.needs_credentials or config.network.docker_hub_credential_secret_arn
    ]


def secret_name(arn: str) -> str:
    """The secret's name: the ARN's resource part without the 6-character suffix Secrets Manager adds."""
    return _SUFFIX.sub("", arn.split(":secret:", 1)[1])


def put_secret_command(arn: str, region: str) -> str:
    return (
        f"aws secretsmanager put-secret-value --region {region} --secret-id {arn} "
        '--secret-string \'{"username":"DOCKER_HUB_USER","accessToken":"DOCKER_HUB_ACCESS_TOKEN"}\''
    )


def create_secret_command(arn: str, region: str) -> str:
    return (
        f"aws secretsmanager create-secret --region {region} --name {secret_name(arn)} "
        '--secret-string \'{"username":"DOCKER_HUB_USER","accessToken":"DOCKER_HUB_ACCESS_TOKEN"}\' '
        "(then put the ARN it prints into network.docker_hub_credential_secret_arn)"
    )


def validate_command(prefix: str, region: str) -> str:
    return f"aws ecr validate-pull-through-cache-rule --region {region} --ecr-repository-prefix {prefix}"


def evaluate_credential(config: EnvironmentConfig, value: str | None) -> Check:
    """``value``: the secret's SecretString, or None when the secret does not exist."""
    arn = config.network.docker_hub_credential_secret_arn
    assert arn is not None
    label = "docker hub credential"
    if value is None:
        return Check(
            label, FAIL, f"secret {arn} does not exist in {config.region}", create_secret_command(arn, config.region)
        )
    try:
        data = json.loads(value)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        return Check(label, FAIL, f"secret {arn} is not JSON", put_secret_command(arn, config.region))
    missing = [k for k in ("username", "accessToken") if not isinstance(data.get(k), str) or not data.get(k)]
    if missing:
        return Check(
            label,
            FAIL,
            f"secret {arn} has no {' and no '.join(missing)}: ECR's pull-through cache needs "
            '{"username": ..., "accessToken": ...}',
            put_secret_command(arn, config.region),
        )
    return Check(label, PASS, f"secret {arn} holds a username and an accessToken")


def evaluate_rule(
    config: EnvironmentConfig,
    cache: versions.PullThroughCache,
    rule: dict[str, Any] | None,
    validation: dict[str, Any] | None,
    *,
    missing_is: str,
) -> Check:
    """``rule``: DescribePullThroughCacheRules' entry (None: not created yet); ``validation``:
    ValidatePullThroughCacheRule's answer. ``missing_is``: the status of a rule not created yet
    (WARN before the first deploy, FAIL after it)."""
    label = f"pull-through cache {cache.prefix}"
    if rule is None:
        return Check(
            label,
            missing_is,
            f"no pull-through cache rule {cache.prefix!r} in {config.region} yet: the cluster stack creates it",
            "deploy the cluster stack, then rerun this command before the HyperPod stack",
        )
    assert validation is not None
    if validation.get("isValid"):
        return Check(label, PASS, f"{cache.prefix} -> {cache.upstream_url} validated by ECR")
    failure = validation.get("failure") or "no reason given"
    fix = validate_command(cache.prefix, config.region)
    if cache.needs_credentials and config.network.docker_hub_credential_secret_arn:
        fix = f"{put_secret_command(config.network.docker_hub_credential_secret_arn, config.region)}; then {fix}"
    return Check(label, FAIL, f"ECR cannot use {cache.prefix} -> {cache.upstream_url}: {failure}", fix)


def image_checks(config: EnvironmentConfig, aws: Aws, *, missing_rule_is: str) -> list[Check]:
    """The credential and rule checks of a ``network.images_from_ecr`` environment (none otherwise)."""
    rules = expected_rules(config)
    if not rules:
        return []
    checks: list[Check] = []
    arn = config.network.docker_hub_credential_secret_arn

    def credential() -> Check:
        assert arn is not None
        try:
            value = aws.call("secretsmanager", "get_secret_value", SecretId=arn).get("SecretString")
        except NotFoundError:
            value = None
        return evaluate_credential(config, value)

    if arn:
        checks += guarded("docker hub credential", credential)

    def rule_checks() -> list[Check]:
        existing = {
            r["ecrRepositoryPrefix"]: r
            for r in aws.paginate("ecr", "describe_pull_through_cache_rules", "pullThroughCacheRules")
        }
        out = []
        for cache in rules:
            rule = existing.get(cache.prefix)
            validation = (
                aws.call("ecr", "validate_pull_through_cache_rule", ecrRepositoryPrefix=cache.prefix)
                if rule is not None
                else None
            )
            out.append(evaluate_rule(config, cache, rule, validation, missing_is=missing_rule_is))
        return out

    checks += guarded("pull-through cache rules", rule_checks)
    return checks
