"""``describe``, ``pods``, ``logs --pod`` and ``logs --output-dir`` through the real ``kubernetes``
client against the local Kubernetes API (tests/ops/kube_api.py)."""

from __future__ import annotations

import copy
import io
import json

import pytest

from config import parse_environment
from ops.cli import main
from tests.ops.fakes import env_data, head_pod, rayjob
from tests.ops.kube_api import JobsApiStandIn, KubeApi

NS = "ray-workloads"
CLUSTER = "hello-x7k2p"
HEAD = f"{CLUSTER}-head-8xk2q"
WORKER = f"{CLUSTER}-gpu-workers-worker-2mzq9"
LOOPBACK_ALLOWED = True


@pytest.fixture
def api():
    with KubeApi() as server:
        yield server


@pytest.fixture
def dev():
    return parse_environment(env_data("dev"), source="test")


@pytest.fixture
def jobs_api():
    dashboard = JobsApiStandIn()
    yield dashboard
    dashboard.close()


def worker_pod(restarts: int = 1) -> dict:
    pod = copy.deepcopy(head_pod(CLUSTER, namespace=NS))
    pod["metadata"]["name"] = WORKER
    pod["metadata"]["labels"].update({"ray.io/node-type": "worker", "ray.io/group": "gpu-workers"})
    pod["spec"]["containers"][0]["name"] = "ray-worker"
    pod["spec"]["nodeName"] = "hyperpod-i-0a1b2c3d4e5f00001"
    pod["status"] = {
        "phase": "Running",
        "startTime": "2026-12-02T12:00:09Z",
        "containerStatuses": [
            {
                "name": "ray-worker",
                "image": "rayproject/ray:2.60.0",
                "imageID": "docker.io/rayproject/ray@sha256:" + "0" * 64,
                "ready": False,
                "restartCount": restarts,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting"}},
            }
        ],
    }
    return pod


def hello(api, stage: str = "running") -> None:
    job = rayjob(stage, name="hello", namespace=NS)
    job["spec"].update(
        {
            "entrypoint": "python train.py --lr 3e-4",
            "runtimeEnvYAML": json.dumps({"pip": ["datasets"], "env_vars": {"HPRAY_JOB": "hello"}}),
            "rayClusterSpec": {
                "headGroupSpec": {
                    "template": {"spec": {"containers": [{"name": "ray-head", "image": "acct.dkr.ecr/ray:1"}]}}
                },
                "workerGroupSpecs": [
                    {
                        "groupName": "gpu-workers",
                        "replicas": 2,
                        "template": {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": 4}}}]}},
                    }
                ],
            },
        }
    )
    api.state.rayjobs[(NS, "hello")] = job
    api.state.add_pod(worker_pod())
    api.state.pod_logs[(NS, WORKER, "ray-worker", False)] = "worker up\nstep 1\nstep 2\n"
    api.state.pod_logs[(NS, WORKER, "ray-worker", True)] = "CUDA error: out of memory\n"
    api.state.events.append(
        {
            "metadata": {"name": "e1", "namespace": NS},
            "involvedObject": {"kind": "RayJob", "name": "hello", "namespace": NS},
            "type": "Normal",
            "reason": "Created",
            "message": "Created RayCluster ray-workloads/hello-x7k2p",
            "lastTimestamp": "2026-12-02T12:00:01Z",
        }
    )


def cli(api, dev, *argv, **kwargs):
    out, err = io.StringIO(), io.StringIO()
    code = main(
        list(argv),
        load_config=lambda n: dev,
        aws_factory=lambda c, p: None,
        kube_factory=lambda a, c, args: api.client(),
        token_fn=lambda *a: None,
        out=out,
        err=err,
        prog="hpray",
        **kwargs,
    )
    return code, out.getvalue(), err.getvalue()


def test_pods_lists_the_head_first_with_phase_restarts_and_reason(api, dev):
    hello(api)
    api.state.add_pod(head_pod(CLUSTER, namespace=NS))
    code, out, _ = cli(api, dev, "pods", "hello", "--env", "dev")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["POD", "TYPE", "PHASE", "READY", "RESTARTS", "NODE", "STARTED", "REASON"]
    assert lines[2].split()[:5] == [HEAD, "head", "Running", "0/1", "0"]
    assert lines[3].split() == [
        WORKER,
        "worker",
        "Running",
        "0/1",
        "1",
        "hyperpod-i-0a1b2c3d4e5f00001",
        "2026-12-02T12:00:09+00:00",
        "CrashLoopBackOff",
    ]
    code, out, _ = cli(api, dev, "pods", "hello", "--env", "dev", "--json")
    assert [p["name"] for p in json.loads(out)["pods"]] == [HEAD, WORKER]


def test_describe_shows_spec_state_pods_and_events(api, dev):
    hello(api)
    code, out, _ = cli(api, dev, "describe", "hello", "--env", "dev")
    assert code == 0, out
    assert "Name:          ray-workloads/hello" in out
    assert "State:         Running / Ray job RUNNING" in out
    assert "Command:       python train.py --lr 3e-4" in out
    assert "Image:         acct.dkr.ecr/ray:1" in out
    assert "Workers:       gpu-workers: 2 x 4 GPUs" in out
    assert "  pip:\n  - datasets" in out
    assert WORKER in out and "CrashLoopBackOff" in out
    assert "Created RayCluster ray-workloads/hello-x7k2p" in out
    data = json.loads(cli(api, dev, "describe", "hello", "--env", "dev", "--json")[1])
    assert data["runtime_env"]["pip"] == ["datasets"] and data["events"][0]["reason"] == "Created"


def test_describe_of_no_such_job_exits_4(api, dev):
    code, _, err = cli(api, dev, "describe", "nope", "--env", "dev")
    assert code == 4
    assert err.splitlines()[0] == "error: no RayJob 'nope' in namespace ray-workloads"


def test_logs_of_one_pod_its_tail_and_its_previous_run(api, dev):
    hello(api)
    assert cli(api, dev, "logs", "hello", "--env", "dev", "--pod", WORKER)[1] == "worker up\nstep 1\nstep 2\n"
    assert cli(api, dev, "logs", "hello", "--env", "dev", "--pod", WORKER, "--tail", "1")[1] == "step 2\n"
    previous = cli(api, dev, "logs", "hello", "--env", "dev", "--pod", WORKER, "--previous")
    assert previous[1] == "CUDA error: out of memory\n"
    followed = cli(api, dev, "logs", "hello", "--env", "dev", "--pod", WORKER, "-c", "ray-worker", "--follow")
    assert followed[:2] == (0, "worker up\nstep 1\nstep 2\n")


def test_logs_of_a_pod_that_is_not_the_jobs_names_its_pods(api, dev):
    hello(api)
    code, _, err = cli(api, dev, "logs", "hello", "--env", "dev", "--pod", "someone-elses")
    assert code == 4
    assert err.splitlines() == [
        f"error: RayJob ray-workloads/hello has no pod 'someone-elses' (its pods: {WORKER})",
        "fix:   list them with: hpray pods hello --env dev",
    ]
    code, _, err = cli(api, dev, "logs", "hello", "--env", "dev", "--pod", WORKER, "-c", "sidecar")
    assert (code, err.splitlines()[0]) == (4, f"error: pod ray-workloads/{WORKER} has no container 'sidecar'")


def test_logs_output_dir_writes_the_driver_and_every_pods_logs(api, dev, jobs_api, tmp_path):
    hello(api)
    api.add_head(head_pod(CLUSTER, namespace=NS), jobs_api.address)
    api.state.pod_logs[(NS, HEAD, "ray-head", False)] = "head started\n"
    jobs_api.logs["hello-9vq4s"] = "driver: epoch 1\n"
    code, out, _ = cli(api, dev, "logs", "hello", "--env", "dev", "--output-dir", str(tmp_path / "logs"))
    assert code == 0, out
    folder = tmp_path / "logs" / "hello"
    assert (folder / "driver.log").read_text() == "driver: epoch 1\n"
    assert (folder / f"{HEAD}.ray-head.log").read_text() == "head started\n"
    assert (folder / f"{WORKER}.ray-worker.log").read_text() == "worker up\nstep 1\nstep 2\n"
    assert (folder / f"{WORKER}.ray-worker.previous.log").read_text() == "CUDA error: out of memory\n"
    assert json.loads((folder / "rayjob.json").read_text())["metadata"]["name"] == "hello"
    assert out.splitlines()[0] == f"wrote {folder / 'driver.log'} (16 bytes)"
    assert len(out.splitlines()) == 5


def test_logs_output_dir_of_a_finished_job_says_what_it_could_not_write(api, dev, tmp_path):
    api.state.rayjobs[(NS, "hello")] = rayjob("complete", name="hello", namespace=NS)
    code, out, _ = cli(api, dev, "logs", "hello", "--env", "dev", "--output-dir", str(tmp_path))
    assert code == 0
    assert out.splitlines() == [
        f"wrote {tmp_path / 'hello' / 'rayjob.json'} ({(tmp_path / 'hello' / 'rayjob.json').stat().st_size} bytes)",
        "not written: driver.log: the Ray cluster is not running",
    ]
