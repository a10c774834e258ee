"""``jobs``, ``logs``, ``stop``, ``resume``, ``dashboard`` through the real ``kubernetes`` client against a
local Kubernetes API (tests/ops/kube_api.py): real HTTP, the log follow stream chunked as the API
server sends it."""

from __future__ import annotations

import base64
import io
import json
import socket

import pytest

from config import parse_environment
from ops.cli import main
from ops.clients import ray_head
from ops.errors import ClusterAccessError, JobNotFoundError, QuotaExceededError
from tests.ops.fakes import env_data, head_pod, rayjob
from tests.ops.kube_api import JobsApiStandIn, KubeApi

NS = "ray-workloads"


# Loopback connections allowed (tests/ops/conftest.py no_network): this module's API server.
LOOPBACK_ALLOWED = True


@pytest.fixture
def api():
    with KubeApi() as server:
        yield server


@pytest.fixture
def dev():
    return parse_environment(env_data("dev"), source="test")


def cli(api, dev, *argv, **kwargs):
    out = io.StringIO()
    code = main(
        list(argv),
        load_config=lambda n: dev,
        aws_factory=lambda c, p: None,
        kube_factory=lambda a, c, args: api.client(),
        out=out,
        prog="hpray",
        **kwargs,
    )
    return code, out.getvalue()


def add_job(api, stage: str, name: str = "hello", **spec):
    obj = rayjob(stage, name=name, namespace=NS)
    obj["spec"].update(spec)
    api.state.rayjobs[(NS, name)] = obj
    return obj


# -- the driver's log: the head's Jobs API through the API's port-forward ---------------------------


@pytest.fixture
def jobs_api():
    """The head of hello's Ray cluster: its pod, and its dashboard's Jobs API on loopback."""
    dashboard = JobsApiStandIn()
    yield dashboard
    dashboard.close()


def test_logs_follow_prints_what_the_log_adds_goes_on_to_the_next_attempt_and_stops_at_the_end(api, dev, jobs_api):
    add_job(api, "running")
    api.add_head(head_pod("hello-x7k2p", namespace=NS), jobs_api.address)
    jobs_api.logs["hello-9vq4s"] = "attempt 1 starts\n"
    ticks = []

    def sleep(_s):
        # The job moves on between two reads, as a cluster does between two polls.
        ticks.append(1)
        if len(ticks) == 1:
            jobs_api.logs["hello-9vq4s"] += "Traceback: boom\npartial"
        elif len(ticks) == 2:
            jobs_api.logs["hello-9vq4s"] += " line\n"
            api.state.rayjobs[(NS, "hello")] = rayjob("running-again", name="hello", namespace=NS)
            api.add_head(head_pod("hello-q3w9z", namespace=NS), jobs_api.address)
            jobs_api.logs["hello-b2m8d"] = "attempt 2 starts\nTRAIN done step=10"
        else:
            api.state.rayjobs[(NS, "hello")] = rayjob("complete", name="hello", namespace=NS)

    code, out = cli(api, dev, "logs", "hello", "--env", "dev", "--follow", sleep=sleep)
    assert code == 0, out
    assert out.splitlines() == [
        "attempt 1 starts",
        "Traceback: boom",
        "partial line",
        "--- next attempt: Ray job hello-b2m8d ---",
        "attempt 2 starts",
        "TRAIN done step=10",
        "RayJob ray-workloads/hello is Complete/SUCCEEDED",
    ]
    # Every read went through the API's pod port-forward to the head's dashboard port.
    assert set(api.state.port_forwards) == {(NS, "hello-x7k2p-head-8xk2q", 8265), (NS, "hello-q3w9z-head-8xk2q", 8265)}
    assert not [h for h in jobs_api.headers if "x-ray-authorization" in h]  # token auth is off here


def test_logs_without_follow_prints_the_tail_as_json_lines(api, dev, jobs_api):
    add_job(api, "running")
    api.add_head(head_pod("hello-x7k2p", namespace=NS), jobs_api.address)
    jobs_api.logs["hello-9vq4s"] = "a\nb\nc\n"
    code, out = cli(api, dev, "logs", "hello", "--env", "dev", "--tail", "2", "--json")
    assert code == 0
    events = [json.loads(line) for line in out.splitlines()]
    assert [(e["job_id"], e["line"]) for e in events] == [("hello-9vq4s", "b"), ("hello-9vq4s", "c")]


def test_logs_send_the_heads_ray_token_where_ray_auth_is_on(api, dev, capsys):
    head = JobsApiStandIn(token="s3cret")
    try:
        add_job(api, "running")
        api.add_head(head_pod("hello-x7k2p", namespace=NS, token_secret="ray-auth-token"), head.address)
        head.logs["hello-9vq4s"] = "hello\n"
        # The token is the one the head runs with (KubeRay's env: the Secret synced from Secrets Manager).
        code, out = cli(api, dev, "logs", "hello", "--env", "dev", token_fn=lambda kube, ns, pod: "s3cret")
        assert (code, out) == (0, "hello\n")
        assert head.headers[-1]["x-ray-authorization"] == "Bearer s3cret"
        code, _ = cli(api, dev, "logs", "hello", "--env", "dev", token_fn=lambda kube, ns, pod: "wrong")
        assert code == 5
        assert (
            "refused the log of job hello-9vq4s: 403 Forbidden: Invalid authentication token" in capsys.readouterr().err
        )
    finally:
        head.close()


def test_logs_take_the_platforms_ray_token_from_secrets_manager_with_the_documented_actions(
    api, dev, shared_moto, capsys
):
    """Without a token_fn (as a user runs it) the token comes from the platform's Secrets Manager
    secret, never from a Kubernetes Secret; the AWS calls are the documented ones."""
    import boto3

    from config.facts import permissions
    from config.facts.names import ray_auth_secret_name
    from tests.ops.fakes import REGION
    from tests.ops.test_ops_permissions import recording_aws

    name = ray_auth_secret_name(dev.name_prefix)
    boto3.client("secretsmanager", region_name=REGION).create_secret(Name=name, SecretString="t0ken")
    head = JobsApiStandIn(token="t0ken")
    aws, calls = recording_aws()
    try:
        add_job(api, "running")
        # KubeRay's env names the synced Secret, which this API does not hold: reading it would fail.
        api.add_head(head_pod("hello-x7k2p", namespace=NS, token_secret="ray-auth-token"), head.address)
        head.logs["hello-9vq4s"] = "hello\n"
        out = io.StringIO()
        code = main(
            ["logs", "hello", "--env", "dev"],
            load_config=lambda n: dev,
            aws_factory=lambda c, p: aws,
            kube_factory=lambda a, c, args: api.client(),
            out=out,
            prog="hpray",
        )
        assert (code, out.getvalue()) == (0, "hello\n"), capsys.readouterr().err
        assert head.headers[-1]["x-ray-authorization"] == "Bearer t0ken"
        assert calls == ["secretsmanager:GetSecretValue"]
        assert set(calls) <= set(permissions.JOBS) and set(permissions.RAY_TOKEN) <= set(permissions.SUBMIT)
    finally:
        head.close()
        boto3.client("secretsmanager", region_name=REGION).delete_secret(SecretId=name, ForceDeleteWithoutRecovery=True)


def test_logs_of_a_k8sjobmode_job_say_where_its_log_is(api, dev, capsys):
    add_job(api, "running", submissionMode="K8sJobMode")
    code, _ = cli(api, dev, "logs", "hello", "--env", "dev")
    assert code == 1
    err = capsys.readouterr().err
    assert "runs in K8sJobMode" in err and "kubectl -n ray-workloads logs job/hello" in err


def test_logs_of_a_job_whose_driver_has_not_started(api, dev, capsys):
    add_job(api, "initializing")
    code, _ = cli(api, dev, "logs", "hello", "--env", "dev")
    assert code == 1
    err = capsys.readouterr().err
    assert "error: RayJob ray-workloads/hello is Initializing: its driver has not started yet" in err
    assert "fix:   follow it until it starts: hpray logs hello --env dev --follow" in err


# -- jobs, stop, resume ---------------------------------------------------------------------------


def test_jobs_lists_state_as_table_and_json(api, dev):
    add_job(api, "running", name="a-job")
    add_job(api, "failed", name="b-job")
    code, out = cli(api, dev, "jobs", "--env", "dev")
    assert code == 0
    header, _rule, *rows = out.splitlines()
    assert header.split() == ["NAMESPACE", "NAME", "STATE", "JOB", "ATTEMPTS", "FAILED", "STARTED", "ENDED"]
    assert sorted(r.split()[1:5] for r in rows) == [
        ["a-job", "Running", "RUNNING", "0"],
        ["b-job", "Failed", "FAILED", "3"],
    ]
    code, out = cli(api, dev, "jobs", "--env", "dev", "--json")
    assert {j["name"]: j["deployment_status"] for j in json.loads(out)["jobs"]} == {
        "a-job": "Running",
        "b-job": "Failed",
    }


def test_stop_suspends_a_running_job_and_resume_clears_it(api, dev):
    add_job(
        api, "running", runtimeEnvYAML=json.dumps({"env_vars": {"HPRAY_CHECKPOINT_DIR": "/fsx/checkpoints/jobs/hello"}})
    )
    code, out = cli(api, dev, "stop", "hello", "--env", "dev")
    assert code == 0
    assert api.state.rayjobs[(NS, "hello")]["spec"]["suspend"] is True
    assert ("PATCH", "/apis/ray.io/v1/namespaces/ray-workloads/rayjobs/hello") in api.state.requests
    assert "checkpoints stay in /fsx/checkpoints/jobs/hello" in out and "hpray resume hello --env dev" in out
    api.state.rayjobs[(NS, "hello")]["status"] = {"jobDeploymentStatus": "Suspended"}
    code, out = cli(api, dev, "stop", "hello", "--env", "dev", "--json")
    assert json.loads(out)["action"] == "none"
    code, out = cli(api, dev, "resume", "hello", "--env", "dev", "--json")
    assert code == 0 and json.loads(out)["action"] == "resumed"
    assert api.state.rayjobs[(NS, "hello")]["spec"]["suspend"] is False


def test_stop_a_finished_job_does_nothing_and_delete_removes_it(api, dev):
    add_job(api, "complete")
    code, out = cli(api, dev, "stop", "hello", "--env", "dev")
    assert code == 0 and "already finished (Complete); nothing to stop" in out
    assert not any(method == "PATCH" for method, _ in api.state.requests)
    code, out = cli(api, dev, "stop", "hello", "--env", "dev", "--delete")
    assert code == 0 and (NS, "hello") not in api.state.rayjobs
    assert "checkpoints stay on FSx" in out


def test_stop_refuses_a_job_kuberay_cannot_suspend(api, dev, capsys):
    add_job(api, "running", shutdownAfterJobFinishes=False)
    code, _ = cli(api, dev, "stop", "hello", "--env", "dev")
    assert code == 1
    assert "--delete" in capsys.readouterr().err
    assert "suspend" not in api.state.rayjobs[(NS, "hello")]["spec"]


@pytest.mark.parametrize(
    "command",
    [
        ["logs", "nope"],
        ["stop", "nope"],
        ["resume", "nope"],
        ["submit", "job", "--attach", "--name", "nope"],
        ["dashboard", "nope"],
    ],
)
def test_no_such_job_exits_4(api, dev, command, capsys):
    code, _ = cli(api, dev, *command, "--env", "dev")
    assert code == 4
    err = capsys.readouterr().err
    assert "'nope'" in err and "hpray jobs --env dev" in err


# -- errors of the API ------------------------------------------------------------------------------


def test_quota_exceeded_on_create_exits_6(api, dev):
    api.state.quota_message = (
        'rayjobs.ray.io "hello" is forbidden: exceeded quota: team-a-quota, requested: '
        "requests.nvidia.com/gpu=8, used: requests.nvidia.com/gpu=4, limited: requests.nvidia.com/gpu=8"
    )
    with pytest.raises(QuotaExceededError) as err:
        api.client().create_ray("RayJob", "team-a", rayjob("new", name="hello", namespace="team-a"))
    assert err.value.exit_code == 6
    assert err.value.message.startswith(
        'the namespace\'s ResourceQuota refused create RayJob in team-a: rayjobs.ray.io "hello" is forbidden: exceeded quota: team-a-quota'
    )
    assert "kubectl -n team-a describe resourcequota" in err.value.fix


def test_unreachable_api_is_no_cluster_access_exit_5(dev, capsys):
    from kubernetes import client

    from ops.clients.kube import Kube

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{port}"
    configuration.retries = 0
    kube = Kube(client.ApiClient(configuration))
    with pytest.raises(ClusterAccessError):
        kube.list_ray("RayJob")
    code = main(
        ["jobs", "--env", "dev"],
        load_config=lambda n: dev,
        aws_factory=lambda c, p: None,
        kube_factory=lambda a, c, args: kube,
        out=io.StringIO(),
    )
    assert code == 5
    assert "cannot reach the Kubernetes API for list rayjobs" in capsys.readouterr().err


# -- dashboard ------------------------------------------------------------------------------------


def head(token_env=None):
    env = [{"name": "RAY_USAGE_STATS_ENABLED", "value": "0"}] + (token_env or [])
    return {
        "metadata": {
            "name": "hello-x7k2p-head-abcde",
            "labels": {"ray.io/cluster": "hello-x7k2p", "ray.io/node-type": "head"},
        },
        "spec": {"containers": [{"name": "ray-head", "env": env}]},
        "status": {"phase": "Running"},
    }


def test_dashboard_picks_the_only_live_cluster_and_its_head(api):
    add_job(api, "running", name="hello")
    add_job(api, "complete", name="old")
    api.state.add_pod({**head(), "metadata": {**head()["metadata"], "namespace": NS}})
    kube = api.client()
    assert ray_head.pick_head(kube, NS, None, prog="hpray", env="dev") == ("hello", "hello-x7k2p")
    assert ray_head.head_pod(kube, NS, "hello-x7k2p")["metadata"]["name"] == "hello-x7k2p-head-abcde"
    add_job(api, "running", name="other")
    with pytest.raises(Exception, match="2 Ray clusters run in ray-workloads: hello, other"):
        ray_head.pick_head(kube, NS, None, prog="hpray", env="dev")
    with pytest.raises(JobNotFoundError):
        ray_head.pick_head(kube, NS, "nope", prog="hpray", env="dev")


def test_dashboard_token_only_where_ray_auth_is_on():
    class Secrets:
        def read_secret_value(self, namespace, name, key):
            assert (namespace, name, key) == (NS, "ray-auth", "token")
            return "s3cr3t"

    assert ray_head.auth_token(Secrets(), NS, head()) is None
    assert ray_head.dashboard_url(8265, None) == "http://127.0.0.1:8265"
    on = head(
        [
            {"name": "RAY_AUTH_MODE", "value": "token"},
            {"name": "RAY_AUTH_TOKEN", "valueFrom": {"secretKeyRef": {"name": "ray-auth", "key": "token"}}},
        ]
    )
    token = ray_head.auth_token(Secrets(), NS, on)
    assert token == "s3cr3t" and ray_head.dashboard_url(8265, token) == "http://127.0.0.1:8265/?token=s3cr3t"
    assert base64.b64encode(b"x")  # (the Kube reads Secrets base64-decoded; see Kube.read_secret_value)
