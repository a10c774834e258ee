"""config/pipeline.yaml: valid as committed; every mistake is a clear error naming the field."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from config import ConfigError
from config.loader import known_environments
from stacks.pipeline_config import PIPELINE_FILE, load_pipeline, parse_pipeline, pipeline_selected

ROOT = Path(__file__).resolve().parents[2]
VALID = yaml.safe_load((ROOT / "config" / PIPELINE_FILE).read_text())


def errors_of(**changes) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_pipeline({**VALID, **changes})
    return info.value.errors


def test_committed_pipeline_config_loads_in_order():
    pipeline, envs = load_pipeline()
    assert pipeline.stages == ["dev", "staging", "prod"]
    assert [e.name for e in envs] == ["dev", "staging", "prod"]
    assert [e.production for e in envs] == [False, False, True]


def test_pipeline_yaml_is_not_an_environment():
    assert "pipeline" not in known_environments()


def test_unknown_environment_is_named_with_the_known_ones():
    assert errors_of(stages=["dev", "qa", "prod"]) == [
        "stages[1]: unknown environment 'qa'; known environments: dev, prod, staging"
    ]


def test_prod_before_dev_is_an_error():
    assert errors_of(stages=["prod", "dev"]) == [
        "stages[0]: production environment 'prod' comes before non-production 'dev' (stages[1]); "
        "production stages must come after every non-production one, e.g. [dev, prod]"
    ]


def test_prod_between_staging_and_dev_is_an_error():
    assert errors_of(stages=["staging", "prod", "dev"]) == [
        "stages[1]: production environment 'prod' comes before non-production 'dev' (stages[2]); "
        "production stages must come after every non-production one, e.g. [staging, dev, prod]"
    ]


def test_repeated_environment_is_an_error():
    assert errors_of(stages=["dev", "dev", "prod"]) == [
        "stages[1]: 'dev' is already stages[0]; each environment is deployed once"
    ]


def test_every_problem_is_reported_together():
    errs = errors_of(
        stages=["prod", "qa", "dev"], account="12", source={**VALID["source"], "connection_arn": "nope"}, stagez=[]
    )
    assert errs == [
        "account: '12' is not an AWS account ID; expected 12 digits (quote it in YAML)",
        "source.connection_arn: 'nope' is not a CodeConnections connection ARN; expected "
        "arn:aws:codeconnections:REGION:ACCOUNT:connection/UUID",
        "stagez: unknown key 'stagez'; did you mean 'stages'?",
        "stages[1]: unknown environment 'qa'; known environments: dev, prod, staging",
        "stages[0]: production environment 'prod' comes before non-production 'dev' (stages[2]); "
        "production stages must come after every non-production one, e.g. [dev, prod]",
    ]


def test_repository_must_be_owner_slash_name():
    assert errors_of(source={**VALID["source"], "repository": "just-a-name"}) == [
        "source.repository: 'just-a-name' is not a repository; expected OWNER/NAME, e.g. example-org/hyperpod-ray-platform"
    ]


def test_pipeline_switch_values():
    assert pipeline_selected("true") and pipeline_selected(True) and not pipeline_selected(None)
    assert not pipeline_selected("false")
    with pytest.raises(ConfigError) as info:
        pipeline_selected("maybe")
    assert info.value.errors == ["pipeline: 'maybe' is not a switch; allowed: true or false"]


def test_bad_pipeline_config_exits_cleanly_without_templates(tmp_path):
    """The app prints the error and exits 1: no traceback, no templates."""
    bad_dir = tmp_path / "config"
    bad_dir.mkdir()
    for f in (ROOT / "config").glob("*.yaml"):
        (bad_dir / f.name).write_text(f.read_text())
    (bad_dir / PIPELINE_FILE).write_text(yaml.safe_dump({**VALID, "stages": ["prod", "dev"]}))
    out = tmp_path / "cdk.out"
    env = {
        **os.environ,
        "CDK_CONTEXT_JSON": json.dumps({"pipeline": "true", "config_dir": str(bad_dir)}),
        "CDK_OUTDIR": str(out),
    }
    proc = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "pipeline.yaml: 1 configuration error:" in proc.stderr
    assert "production environment 'prod' comes before non-production 'dev'" in proc.stderr
    assert not list(out.glob("**/*.template.json")) and not (out / "manifest.json").exists()


def test_docker_hub_credential_must_be_a_complete_secret_arn():
    assert errors_of(docker_hub_credential_secret_arn="nope") == [
        "docker_hub_credential_secret_arn: 'nope' is not the complete ARN of a Secrets Manager secret; expected "
        "arn:aws:secretsmanager:REGION:ACCOUNT:secret:NAME-XXXXXX (the ARN `aws secretsmanager describe-secret` prints)"
    ]


def test_docker_hub_credential_must_be_in_the_pipelines_account_and_region():
    arn = "arn:aws:secretsmanager:us-west-2:444444444444:secret:hub-Xy12Zw"
    assert errors_of(docker_hub_credential_secret_arn=arn) == [
        f"docker_hub_credential_secret_arn: {arn!r} is in account 444444444444, region us-west-2; the asset stage "
        "reads a secret of the pipeline's own account and region (444444444444, us-east-1)"
    ]


def test_docker_hub_credential_is_required():
    data = {k: v for k, v in VALID.items() if k != "docker_hub_credential_secret_arn"}
    with pytest.raises(ConfigError) as info:
        parse_pipeline(data)
    assert [e for e in info.value.errors if e.startswith("docker_hub_credential_secret_arn")]
