"""ops/reports/images.py: preflight (before the HyperPod stack) and status (after the deploy) check the
Docker Hub credential and every pull-through cache rule of an images_from_ecr environment, each
failure with the command that fixes it. Secrets Manager is moto; ECR's pull-through calls, which
moto lacks, are botocore stubs."""

from __future__ import annotations

import contextlib
import json

import boto3
import pytest
from botocore.stub import Stubber

from config import parse_environment
from config.facts import permissions
from ops.reports.checks import FAIL, PASS, WARN
from ops.reports.images import evaluate_credential, evaluate_rule, expected_rules, image_checks
from ops.reports.status import problems_of
from tests.ops.fakes import ACCOUNT, REGION, healthy_data, shared_aws

NAME = "ecr-pullthroughcache/hpray-dev-docker-hub"
PLACEHOLDER_ARN = f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:{NAME}-Ab12Cd"
PUT = (
    "aws secretsmanager put-secret-value --region us-east-1 --secret-id {arn} --secret-string "
    '\'{{"username":"DOCKER_HUB_USER","accessToken":"DOCKER_HUB_ACCESS_TOKEN"}}\''
)


def closed_config(arn: str = PLACEHOLDER_ARN):
    data = healthy_data()
    data["network"]["images_from_ecr"] = True
    data["network"]["docker_hub_credential_secret_arn"] = arn
    return parse_environment(data, source="test")


def rule(prefix: str, upstream: str) -> dict:
    return {"ecrRepositoryPrefix": prefix, "upstreamRegistryUrl": upstream, "registryId": ACCOUNT}


def stub_ecr(aws, rules: list[dict], validations: dict[str, dict]) -> Stubber:
    stubber = Stubber(aws.client("ecr"))
    stubber.add_response("describe_pull_through_cache_rules", {"pullThroughCacheRules": rules}, {})
    for r in rules:
        prefix = r["ecrRepositoryPrefix"]
        stubber.add_response(
            "validate_pull_through_cache_rule",
            {"ecrRepositoryPrefix": prefix, "registryId": ACCOUNT, **validations[prefix]},
            {"ecrRepositoryPrefix": prefix},
        )
    stubber.activate()
    return stubber


def test_a_closed_environment_checks_both_rules_an_open_one_none():
    assert [c.prefix for c in expected_rules(closed_config())] == ["quay", "docker-hub"]
    assert expected_rules(parse_environment(healthy_data(), source="test")) == []


@pytest.mark.parametrize(
    ("value", "status", "detail"),
    [
        (None, FAIL, f"secret {PLACEHOLDER_ARN} does not exist in us-east-1"),
        ("placeholder", FAIL, f"secret {PLACEHOLDER_ARN} is not JSON"),
        (
            '{"username": "me", "password": "x"}',
            FAIL,
            f"secret {PLACEHOLDER_ARN} has no accessToken: ECR's pull-through cache needs "
            '{"username": ..., "accessToken": ...}',
        ),
        (
            '{"username": "me", "accessToken": "dckr_pat_x"}',
            PASS,
            f"secret {PLACEHOLDER_ARN} holds a username and an accessToken",
        ),
    ],
)
def test_credential_is_json_with_username_and_access_token(value, status, detail):
    check = evaluate_credential(closed_config(), value)
    assert (check.status, check.detail) == (status, detail)
    if value is None:
        assert check.fix == (
            f"aws secretsmanager create-secret --region us-east-1 --name {NAME} --secret-string "
            '\'{"username":"DOCKER_HUB_USER","accessToken":"DOCKER_HUB_ACCESS_TOKEN"}\' '
            "(then put the ARN it prints into network.docker_hub_credential_secret_arn)"
        )
    elif status == FAIL:
        assert check.fix == PUT.format(arn=PLACEHOLDER_ARN)


def test_a_rule_not_created_yet_warns_before_and_fails_after_the_deploy():
    config = closed_config()
    (quay, _) = expected_rules(config)
    before = evaluate_rule(config, quay, None, None, missing_is=WARN)
    after = evaluate_rule(config, quay, None, None, missing_is=FAIL)
    assert (before.status, after.status) == (WARN, FAIL)
    assert after.detail == "no pull-through cache rule 'quay' in us-east-1 yet: the cluster stack creates it"


def test_an_invalid_docker_hub_rule_fails_with_the_commands_that_fix_it():
    config = closed_config()
    (_, hub) = expected_rules(config)
    check = evaluate_rule(
        config,
        hub,
        rule("docker-hub", "registry-1.docker.io"),
        {"isValid": False, "failure": "Invalid credentials"},
        missing_is=WARN,
    )
    assert check.status == FAIL
    assert check.detail == "ECR cannot use docker-hub -> registry-1.docker.io: Invalid credentials"
    assert check.fix == (
        PUT.format(arn=PLACEHOLDER_ARN)
        + "; then aws ecr validate-pull-through-cache-rule --region us-east-1 --ecr-repository-prefix docker-hub"
    )


def _secret(shared_moto, value: str) -> str:
    sm = boto3.client("secretsmanager", region_name=REGION)
    with contextlib.suppress(sm.exceptions.ResourceNotFoundException):
        sm.delete_secret(SecretId=NAME, ForceDeleteWithoutRecovery=True)
    return sm.create_secret(Name=NAME, SecretString=value)["ARN"]


def test_preflight_with_a_good_secret_and_valid_rules_passes(shared_moto):
    arn = _secret(shared_moto, json.dumps({"username": "me", "accessToken": "dckr_pat_x"}))
    aws = shared_aws()
    stub = stub_ecr(
        aws,
        [rule("quay", "quay.io"), rule("docker-hub", "registry-1.docker.io")],
        {"quay": {"isValid": True}, "docker-hub": {"isValid": True}},
    )
    checks = image_checks(closed_config(arn), aws, missing_rule_is=WARN)
    stub.assert_no_pending_responses()
    assert [(c.check, c.status) for c in checks] == [
        ("docker hub credential", PASS),
        ("pull-through cache quay", PASS),
        ("pull-through cache docker-hub", PASS),
    ]


def test_status_fails_until_the_secret_is_filled(shared_moto):
    arn = _secret(shared_moto, "{}")
    aws = shared_aws()
    stub_ecr(
        aws,
        [rule("quay", "quay.io"), rule("docker-hub", "registry-1.docker.io")],
        {"quay": {"isValid": True}, "docker-hub": {"isValid": False, "failure": "Invalid credentials"}},
    )
    checks = image_checks(closed_config(arn), aws, missing_rule_is=FAIL)
    report = {"images": [c.as_dict() for c in checks]}
    assert problems_of(report) == [
        f"docker hub credential: secret {arn} has no username and no accessToken: ECR's pull-through cache "
        f'needs {{"username": ..., "accessToken": ...}}; fix: {PUT.format(arn=arn)}',
        "pull-through cache docker-hub: ECR cannot use docker-hub -> registry-1.docker.io: Invalid credentials; "
        f"fix: {PUT.format(arn=arn)}; then aws ecr validate-pull-through-cache-rule --region us-east-1 "
        "--ecr-repository-prefix docker-hub",
    ]


def test_a_missing_secret_is_a_failure_not_an_error(shared_moto):
    aws = shared_aws()
    stub_ecr(aws, [], {})
    arn = f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:ecr-pullthroughcache/nothing-here-Zz99Yy"
    checks = image_checks(closed_config(arn), aws, missing_rule_is=WARN)
    assert [(c.check, c.status) for c in checks] == [
        ("docker hub credential", FAIL),
        ("pull-through cache quay", WARN),
        ("pull-through cache docker-hub", WARN),
    ]


def test_the_image_checks_call_exactly_the_documented_actions(shared_moto):
    from tests.ops.test_ops_permissions import recording_aws

    arn = _secret(shared_moto, json.dumps({"username": "me", "accessToken": "t"}))
    aws, calls = recording_aws()
    stub_ecr(aws, [rule("quay", "quay.io")], {"quay": {"isValid": True}})
    image_checks(closed_config(arn), aws, missing_rule_is=WARN)
    assert tuple(calls) == permissions.IMAGES
