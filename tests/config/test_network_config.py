"""config/network.py and its cross-section rule: the Docker Hub credential the pull-through cache
signs in with is a secret the operator names, in the environment's account and region."""

from __future__ import annotations

from config import load_environment
from tests.config.config_data import config_errors, env_data

FIELD = "network.docker_hub_credential_secret_arn"
PROD_ARN = "arn:aws:secretsmanager:us-east-1:333333333333:secret:ecr-pullthroughcache/hpray-prod-docker-hub-Ab12Cd"


def _set(arn):
    return lambda d: d["network"].update(docker_hub_credential_secret_arn=arn)


def test_closed_environments_with_the_llm_service_name_a_credential():
    for env in ("staging", "prod"):
        config = load_environment(env)
        assert config.network.images_from_ecr and config.inference.llm.enabled
        assert config.network.docker_hub_credential_secret_arn.split(":")[4] == config.account
    assert load_environment("dev").network.docker_hub_credential_secret_arn is None


def test_missing_credential_with_the_llm_service_is_an_error():
    errs = config_errors("prod", lambda d: d["network"].pop("docker_hub_credential_secret_arn"))
    assert errs == [
        f"{FIELD}: required with network.images_from_ecr and inference.llm.enabled: the Serve LLM image "
        "(rayproject/ray-llm) comes through ECR's Docker Hub pull-through cache, which signs in with a "
        'secret named ecr-pullthroughcache/... holding {"username": ..., "accessToken": ...}; create it '
        "(docs/security.md) and put its ARN here"
    ]


def test_no_credential_needed_without_the_llm_service():
    from config import parse_environment

    data = env_data("prod")
    data["network"].pop("docker_hub_credential_secret_arn")
    data["inference"]["llm"]["enabled"] = False
    assert parse_environment(data, source="prod.yaml").network.docker_hub_credential_secret_arn is None


def test_a_secret_without_the_prefix_ecr_requires():
    arn = "arn:aws:secretsmanager:us-east-1:333333333333:secret:docker-hub-Ab12Cd"
    assert config_errors("prod", _set(arn)) == [
        f"{FIELD}: {arn!r} is not the complete ARN of a Secrets Manager secret whose name starts with "
        "ecr-pullthroughcache/; expected arn:aws:secretsmanager:REGION:ACCOUNT:secret:"
        "ecr-pullthroughcache/NAME-XXXXXX (the ARN `aws secretsmanager describe-secret` prints)"
    ]


def test_a_partial_arn_without_the_suffix_is_refused():
    arn = "arn:aws:secretsmanager:us-east-1:333333333333:secret:ecr-pullthroughcache/hpray-prod-docker-hub"
    errs = config_errors("prod", _set(arn))
    assert len(errs) == 1 and f"{arn!r} is not the complete ARN" in errs[0]


def test_a_secret_of_another_account_or_region():
    arn = PROD_ARN.replace("333333333333", "444444444444").replace("us-east-1", "us-west-2")
    assert config_errors("prod", _set(arn)) == [
        f"{FIELD}: {arn!r} is in account 444444444444, region us-west-2; ECR's pull-through cache reads only "
        "a secret of its own account and region (333333333333, us-east-1)"
    ]


def test_a_credential_where_nothing_pulls_through_ecr():
    arn = PROD_ARN.replace("333333333333", "111111111111")
    assert config_errors("dev", _set(arn)) == [
        f"{FIELD}: set, but network.images_from_ecr is false: nothing pulls through ECR; remove it"
    ]
