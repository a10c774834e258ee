"""The command line as an operator meets it: help, tables, --json, exit codes, clear errors."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ops.cli import build_parser, main
from ops.errors import UsageError
from tests.ops.fakes import create_bootstrap_stack, quota, shared_aws, stub_eks_versions, stub_quotas

ROOT = Path(__file__).resolve().parents[2]


def stubbed_aws(value=4):
    def factory(config, profile):
        aws = shared_aws(config.region)
        stub_quotas(aws, applied=[quota("ml.g5.12xlarge", value, "L-6E1E3A2B")], defaults=[])
        stub_eks_versions(aws)
        return aws

    return factory


def run_cli(argv, **kwargs):
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, out=out, err=err, **kwargs)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["preflight", "--help"], ["status", "--help"], ["submit", "job", "--help"], ["describe", "--help"]],
)
def test_help_reads_well(argv, capsys):
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(argv)
    assert info.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: python -m ops")
    if argv != ["--help"]:
        assert "--env NAME" in text and "--json" in text
    else:
        assert "exit codes:" in text and "python -m ops preflight --env dev" in text


def test_env_is_required_and_checked():
    with pytest.raises(UsageError) as info:
        build_parser().parse_args(["status", "--env", "qa"])
    assert info.value.exit_code == 2
    assert info.value.message == "argument --env: invalid choice: 'qa' (choose from 'dev', 'prod', 'staging')"
    assert info.value.fix == "see python -m ops status --help"


def test_submit_help_lists_the_workloads(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["submit", "--help"])
    text = capsys.readouterr().out
    assert text.startswith("usage: python -m ops submit WORKLOAD --env NAME [options]")
    assert "  job         your own command (after --)" in text


@pytest.fixture(scope="module")
def bootstrapped(shared_moto):
    create_bootstrap_stack()


def test_preflight_table_for_a_healthy_environment(bootstrapped, healthy_config):
    code, out, err = run_cli(
        ["preflight", "--env", "dev"], load_config=lambda n: healthy_config, aws_factory=stubbed_aws()
    )
    assert code == 0, out + err
    lines = out.splitlines()
    assert lines[0] == "Preflight for environment dev (account 111111111111, us-east-1)"
    assert lines[2].split() == ["RESULT", "CHECK", "DETAIL"]
    assert any(
        line.startswith("PASS    quota ml.g5.12xlarge  'ml.g5.12xlarge for cluster usage' is 4") for line in lines
    ), out
    assert any(re.match(r"PASS +base image digest +rayproject/ray:\S+@sha256:[0-9a-f]{64}$", line) for line in lines), (
        out
    )
    assert lines[-1] == "9 checks: 0 failed, 0 warning(s): ready to deploy"


def test_preflight_fails_on_an_unpinned_base_image_with_the_pin_command(
    bootstrapped, healthy_config, pinned_dockerfile, monkeypatch
):
    from ops.reports import base_image

    unpinned = pinned_dockerfile.with_name("Dockerfile.unpinned")
    text = pinned_dockerfile.read_text()
    unpinned.write_text(re.sub(r'^ARG RAY_BASE_DIGEST=".*"$', 'ARG RAY_BASE_DIGEST=""', text, flags=re.M))
    monkeypatch.setattr(base_image, "DOCKERFILE", unpinned)
    code, out, _ = run_cli(
        ["preflight", "--env", "dev"], load_config=lambda n: healthy_config, aws_factory=stubbed_aws()
    )
    assert code == 1
    base = base_image.read_base(unpinned)[0]
    # The table's columns, split where two or more spaces separate them.
    at = next(i for i, line in enumerate(out.splitlines()) if "base image digest" in line)
    rows = [re.split(r" {2,}", line.strip()) for line in out.splitlines()[at : at + 2]]
    assert rows == [
        [
            "FAIL",
            "base image digest",
            f"the workloads image would be built from {base} by tag alone: RAY_BASE_DIGEST in workloads/Dockerfile is empty",
        ],
        [
            "fix: hpray images pin-base (on a machine that reaches Docker Hub), then commit workloads/Dockerfile and deploy"
        ],
    ]
    assert out.splitlines()[-1] == "9 checks: 1 failed, 0 warning(s): NOT ready to deploy"


def test_preflight_failure_shows_the_fix_and_exits_1(bootstrapped, healthy_config):
    code, out, _ = run_cli(
        ["preflight", "--env", "dev"], load_config=lambda n: healthy_config, aws_factory=stubbed_aws(value=1)
    )
    assert code == 1
    assert (
        "fix: aws service-quotas request-service-quota-increase --service-code sagemaker --quota-code L-6E1E3A2B --desired-value 2 --region us-east-1"
        in out
    )
    assert out.splitlines()[-1] == "9 checks: 1 failed, 0 warning(s): NOT ready to deploy"


def test_preflight_json(bootstrapped, healthy_config):
    code, out, _ = run_cli(
        ["preflight", "--env", "dev", "--json", "--toolkit-stack-name", "CDKToolkitQa"],
        load_config=lambda n: healthy_config,
        aws_factory=stubbed_aws(),
    )
    data = json.loads(out)
    assert code == 1  # no such bootstrap stack in this account
    assert data["passed"] is False and data["environment"] == "dev"
    assert {c["check"]: c["status"] for c in data["checks"]}["cdk bootstrap"] == "FAIL"


def test_missing_credentials_in_process(no_credentials):
    code, out, err = run_cli(["preflight", "--env", "dev", "--json"])
    assert code == 3
    assert err.splitlines()[0].startswith("error: no AWS credentials found")
    assert err.splitlines()[1].startswith(
        "fix:   sign in and point the CLI at the account: `aws sso login --profile NAME`"
    )
    assert json.loads(out)["kind"] == "CredentialsError"


def test_missing_credentials_as_a_real_process_has_no_traceback(tmp_path):
    """`python -m ops` in a fresh process with no credentials anywhere: a clear message, exit 3.
    No network: credentials are resolved locally first, and instance metadata is disabled."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
        AWS_EC2_METADATA_DISABLED="true",
        PYTHONPATH=str(ROOT),
    )
    result = subprocess.run(
        [sys.executable, "-m", "ops", "status", "--env", "prod"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 3, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("error: no AWS credentials found")
    assert result.stdout == ""


def test_an_unexpected_bug_is_one_line_unless_debugging(monkeypatch):
    def broken(config, profile):
        raise ZeroDivisionError("division by zero")

    code, _, err = run_cli(["status", "--env", "dev"], aws_factory=broken)
    assert code == 1
    assert err == "internal error: ZeroDivisionError: division by zero (rerun with OPS_DEBUG=1 for the traceback)\n"
    monkeypatch.setenv("OPS_DEBUG", "1")
    _, _, err = run_cli(["status", "--env", "dev"], aws_factory=broken)
    assert "Traceback" in err


def test_invalid_config_is_reported_not_raised():
    from config import ConfigError

    def bad(name):
        raise ConfigError("dev.yaml", ["network.vpc_cidr: '10.0.0.0/33' is not a valid IPv4 CIDR block"])

    code, _, err = run_cli(["preflight", "--env", "dev"], load_config=bad)
    assert code == 2
    assert (
        err == "dev.yaml: 1 configuration error:\n  - network.vpc_cidr: '10.0.0.0/33' is not a valid IPv4 CIDR block\n"
    )
