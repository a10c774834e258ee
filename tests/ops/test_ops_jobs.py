"""``jobs``, ``logs``, ``stop``, ``resume``, ``dashboard`` through the real ``kubernetes`` client against a
local Kubernetes API (tests/ops/kube_api.py): real HTTP, the log follow stream chunked as the API
server sends it."""

from __future__ import annotations

import base64
import io
import json
import socket
import threading

import pytest

from config import parse_environment
from ops import jobs
from ops.cli import main
from ops.errors import ClusterAccessError, JobNotFoundError, QuotaExceededError
from tests.ops.fakes import env_data, rayjob, submitter_pod
from tests.ops.kube_api import KubeApi, LogSource

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


# -- the follow stream ---------------------------------------------------------------------------


def test_stream_log_yields_each_line_as_the_container_writes_it(api):
    """The second line is written only after the client has the first: a client that re-read or
    waited for the end would block here (and the gate's timeout would fail the test)."""
    source = api.state.add_pod(submitter_pod(name="hello", namespace=NS), LogSource(["line 1"]))
    got_first = threading.Event()

    def container():
        assert got_first.wait(timeout=20), "the client did not get line 1 while the stream was open"
        source.write('line 2 {"step": 5}')
        source.close()

    threading.Thread(target=container, daemon=True).start()
    lines = []
    for line in api.client().stream_log(NS, "hello-h5x2l", follow=True):
        lines.append(line)
        got_first.set()
    assert lines == ["line 1", 'line 2 {"step": 5}']
    # One request, held open: not polling.
    assert [r for r in api.state.requests if "/log" in r[1]] == [
        ("GET", "/api/v1/namespaces/ray-workloads/pods/hello-h5x2l/log?follow=True")
    ]


def test_logs_follow_goes_on_to_the_next_attempt_and_stops_when_the_job_ends(api, dev):
    add_job(api, "running")
    first = api.state.add_pod(
        submitter_pod(name="hello", suffix="aaaaa", created="2026-12-02T12:00:40Z", namespace=NS),
        LogSource(["attempt 1 starts"]),
    )

    def cluster():
        first.write("Traceback: boom")
        first.close()
        second = api.state.add_pod(
            submitter_pod(name="hello", suffix="bbbbb", created="2026-12-02T12:05:00Z", namespace=NS),
            LogSource(["attempt 2 starts"]),
        )
        second.write("TRAIN done step=10")
        api.state.rayjobs[(NS, "hello")] = rayjob("complete", name="hello", namespace=NS)
        second.close()

    threading.Timer(0.3, cluster).start()
    code, out = cli(api, dev, "logs", "hello", "--env", "dev", "--follow")
    assert code == 0
    assert out.splitlines() == [
        "attempt 1 starts",
        "Traceback: boom",
        "--- next attempt: pod hello-bbbbb ---",
        "attempt 2 starts",
        "TRAIN done step=10",
        "RayJob ray-workloads/hello is Complete/SUCCEEDED",
    ]


def test_logs_without_follow_prints_the_newest_attempts_tail_as_json_lines(api, dev):
    add_job(api, "running")
    api.state.add_pod(
        submitter_pod(name="hello", suffix="aaaaa", created="2026-12-02T12:00:40Z", namespace=NS), LogSource(["old"])
    )
    api.state.add_pod(
        submitter_pod(name="hello", suffix="bbbbb", created="2026-12-02T12:05:00Z", namespace=NS),
        LogSource(["a", "b", "c"]),
    )
    code, out = cli(api, dev, "logs", "hello", "--env", "dev", "--tail", "2", "--json")
    assert code == 0
    events = [json.loads(line) for line in out.splitlines()]
    assert events[0]["message"].startswith("(attempt 2 of the submitter, pod hello-bbbbb")
    assert [(e["pod"], e["line"]) for e in events[1:]] == [("hello-bbbbb", "b"), ("hello-bbbbb", "c")]


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

    from ops.kube import Kube

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
    assert jobs.pick_head(kube, NS, None, prog="hpray", env="dev") == ("hello", "hello-x7k2p")
    assert jobs.head_pod(kube, NS, "hello-x7k2p")["metadata"]["name"] == "hello-x7k2p-head-abcde"
    add_job(api, "running", name="other")
    with pytest.raises(Exception, match="2 Ray clusters run in ray-workloads: hello, other"):
        jobs.pick_head(kube, NS, None, prog="hpray", env="dev")
    with pytest.raises(JobNotFoundError):
        jobs.pick_head(kube, NS, "nope", prog="hpray", env="dev")


def test_dashboard_token_only_where_ray_auth_is_on():
    class Secrets:
        def read_secret_value(self, namespace, name, key):
            assert (namespace, name, key) == (NS, "ray-auth", "token")
            return "s3cr3t"

    assert jobs.auth_token(Secrets(), NS, head()) is None
    assert jobs.dashboard_url(8265, None) == "http://127.0.0.1:8265"
    on = head(
        [
            {"name": "RAY_AUTH_MODE", "value": "token"},
            {"name": "RAY_AUTH_TOKEN", "valueFrom": {"secretKeyRef": {"name": "ray-auth", "key": "token"}}},
        ]
    )
    token = jobs.auth_token(Secrets(), NS, on)
    assert token == "s3cr3t" and jobs.dashboard_url(8265, token) == "http://127.0.0.1:8265/?token=s3cr3t"
    assert base64.b64encode(b"x")  # (the Kube reads Secrets base64-decoded; see Kube.read_secret_value)
