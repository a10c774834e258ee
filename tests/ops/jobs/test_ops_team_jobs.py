"""The job commands with only a team's namespaced permissions: the local Kubernetes API
(tests/ops/kube_api.py) answers Forbidden to every request the team's Role
(constructs/team_access.py) does not allow in the team's namespace, and the Ray token comes from
the team's own Secrets Manager secret (moto)."""

from __future__ import annotations

import io
import json

import boto3
import pytest
from constructs import team_access as ta

from config import parse_environment
from config.facts.names import ray_auth_secret_name, team_ray_auth_secret_name
from ops.cli import main
from tests.ops.fakes import REGION, env_data, head_pod, rayjob
from tests.ops.kube_api import JobsApiStandIn, KubeApi

LOOPBACK_ALLOWED = True
TEAMS = [
    {"name": "vision", "principal_arns": ["arn:aws:iam::111111111111:role/VisionTeam"]},
    {"name": "speech", "principal_arns": ["arn:aws:iam::111111111111:role/SpeechTeam"]},
]
NS = "team-vision"


@pytest.fixture
def two_teams():
    data = env_data("dev")
    data["teams"] = TEAMS
    return parse_environment(data, source="test")


@pytest.fixture
def api(two_teams):
    with KubeApi() as server:
        team = next(t for t in two_teams.teams if t.name == "vision")
        role = next(m for m in ta.team_manifests(team, vpc_cidr="10.0.0.0/16") if m["kind"] == "Role")
        server.state.rbac = (NS, role["rules"])
        yield server


def run(api, config, aws, *argv):
    out = io.StringIO()
    code = main(
        list(argv),
        load_config=lambda n: config,
        aws_factory=lambda c, p: aws,
        kube_factory=lambda a, c, args: api.client(),
        out=out,
        prog="hpray",
    )
    return code, out.getvalue()


def test_jobs_in_the_team_namespace_work_with_the_teams_role_only(api, two_teams, capsys):
    api.state.rayjobs[(NS, "mine")] = rayjob("running", name="mine", namespace=NS)
    api.state.rayjobs[("ray-workloads", "prod")] = rayjob("running", name="prod", namespace="ray-workloads")
    api.state.rayjobs[("team-speech", "theirs")] = rayjob("running", name="theirs", namespace="team-speech")
    code, out = run(api, two_teams, None, "jobs", "--env", "dev", "-n", NS, "--json")
    assert code == 0, capsys.readouterr().err
    assert [j["name"] for j in json.loads(out)["jobs"]] == ["mine"]
    assert api.state.forbidden == []
    # stop and resume: get and patch in the namespace.
    assert run(api, two_teams, None, "stop", "mine", "--env", "dev", "-n", NS)[0] == 0
    assert api.state.rayjobs[(NS, "mine")]["spec"]["suspend"] is True
    # Anything beyond the namespace is refused, as the API server refuses it.
    for argv in (("jobs", "--env", "dev", "-A"), ("jobs", "--env", "dev", "-n", "ray-workloads")):
        code, _ = run(api, two_teams, None, *argv)
        assert code == 5
        assert "forbidden" in capsys.readouterr().err
    assert len(api.state.forbidden) == 2


def test_logs_read_the_teams_own_token_from_secrets_manager(api, two_teams, shared_moto, capsys):
    from tests.ops.test_ops_permissions import recording_aws

    sm = boto3.client("secretsmanager", region_name=REGION)
    team_secret = team_ray_auth_secret_name(two_teams.name_prefix, "vision")
    platform_secret = ray_auth_secret_name(two_teams.name_prefix)
    sm.create_secret(Name=team_secret, SecretString="vision-t0ken")
    sm.create_secret(Name=platform_secret, SecretString="platform-t0ken")
    head = JobsApiStandIn(token="vision-t0ken")
    aws, calls = recording_aws()
    ids: list[str] = []
    aws.session.events.register(
        "provide-client-params.secrets-manager.GetSecretValue", lambda params, **_: ids.append(params["SecretId"])
    )
    try:
        api.state.rayjobs[(NS, "hello")] = rayjob("running", name="hello", namespace=NS)
        api.add_head(head_pod("hello-x7k2p", namespace=NS, token_secret="ray-auth-token"), head.address)
        head.logs["hello-9vq4s"] = "hello\n"
        code, out = run(api, two_teams, aws, "logs", "hello", "--env", "dev", "-n", NS)
        assert (code, out) == (0, "hello\n"), capsys.readouterr().err
        assert head.headers[-1]["x-ray-authorization"] == "Bearer vision-t0ken"
        assert calls == ["secretsmanager:GetSecretValue"] and ids == [team_secret]
        # No Kubernetes Secret was read (the Role allows none) and nothing was refused.
        assert api.state.forbidden == []
        assert not [p for _, p in api.state.requests if "/secrets" in p]
    finally:
        head.close()
        for name in (team_secret, platform_secret):
            sm.delete_secret(SecretId=name, ForceDeleteWithoutRecovery=True)


def test_submit_job_in_the_team_namespace_uploads_under_the_team_prefix_without_fsx(
    api, two_teams, shared_moto, tmp_path
):
    from ops.clients.aws import Aws

    (tmp_path / "train.py").write_text("print('hi')\n")
    s3 = boto3.client("s3", region_name=REGION)
    bucket = two_teams.bucket_names()["checkpoints"]
    s3.create_bucket(Bucket=bucket)
    argv = ["submit", "job", "--env", "dev", "-n", NS, "--working-dir", str(tmp_path), "--name", "hello"]
    code, out = run(api, two_teams, Aws(REGION), *argv, "--no-follow", "--json", "--", "python", "train.py")
    assert code == 0, out
    assert api.state.forbidden == []
    uri = next(json.loads(line)["uri"] for line in out.splitlines() if '"uploaded"' in line)
    assert uri.startswith(f"s3://{bucket}/teams/vision/jobs/hello/")
    job = api.state.rayjobs[(NS, "hello")]
    env_vars = json.loads(job["spec"]["runtimeEnvYAML"])["env_vars"]
    assert env_vars["HPRAY_CHECKPOINT_DIR"] == f"s3://{bucket}/teams/vision/checkpoints/hello"
    spec = job["spec"]["rayClusterSpec"]
    for template in [spec["headGroupSpec"]["template"], *(g["template"] for g in spec["workerGroupSpecs"])]:
        assert not [v for v in template["spec"]["volumes"] if "persistentVolumeClaim" in v]
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for obj in page.get("Contents", []):
            s3.delete_object(Bucket=bucket, Key=obj["Key"])
    s3.delete_bucket(Bucket=bucket)
