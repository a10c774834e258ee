"""``hpray submit job`` end to end on this machine: a new user's own script, in a directory of its own,
runs on a real Ray cluster (rigs/local_cluster.py) with its code taken from S3.

- S3: moto's server on 127.0.0.1; the CLI uploads the working directory there, as it would to the
  checkpoint bucket.
- Ray: every node's runtime env agent downloads that zip (``working_dir: s3://...``) from the same
  server with boto3, as Ray pods do with their Pod Identity credentials; the script imports a
  module of its own directory on the driver and in a task on a worker node.
- Kubernetes: tests/ops/kube_api.py, real HTTP, with the pod ``portforward`` websocket relayed to
  the Ray head's real dashboard port. The one stand-in is KubeRay itself: when the RayJob is
  created, the test does what KubeRay's HTTPMode does (submit the RayJob's entrypoint and runtime
  env to the head's Jobs API under ``status.jobId``, poll it, move the RayJob's status along).
- The CLI follows the job to success from the driver's log, read from the real Jobs API through
  that port-forward (steps, loss, checkpoint), and ``hpray logs`` reads it back the same way.
"""

from __future__ import annotations

import io
import json
import os
import sys
import threading
import time
import urllib.request
from pathlib import Path

import boto3
import pytest
import ray

from config import parse_environment
from ops.cli import main
from ops.clients.aws import Aws
from rigs.local_cluster import LocalCluster, free_port
from tests.ops.fakes import REGION, env_data, head_pod
from tests.ops.kube_api import KubeApi

pytestmark = [pytest.mark.slow, pytest.mark.ray_cluster]
NS = "ray-workloads"

TRAIN = """\
import os

import ray

from helper import GREETING, loss_at

ray.init()


@ray.remote(num_cpus=1, resources={"worker_node": 0.01})
def on_a_worker():
    import helper  # the working directory is on the worker node too
    return helper.GREETING, os.path.basename(os.getcwd()) != ""


print(f"driver says {GREETING}", flush=True)
print(f"worker says {ray.get(on_a_worker.remote())[0]}", flush=True)
steps = 3
for step in range(1, steps + 1):
    print(f"step {step}/{steps} loss {loss_at(step):.3f}", flush=True)
print(f"checkpoint saved at step {steps} in {os.environ['HPRAY_CHECKPOINT_DIR']}", flush=True)
"""

HELPER = """\
GREETING = "hello from my own code"


def loss_at(step):
    return 1.0 / step
"""


# Loopback connections allowed (tests/ops/conftest.py no_network): moto's server, the Ray cluster and the local Kubernetes API.
LOOPBACK_ALLOWED = True


@pytest.fixture(scope="module")
def s3():
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def kuberay_stand_in(api: KubeApi, cluster: LocalCluster):
    """What KubeRay does for an HTTPMode RayJob, on the local cluster: the RayCluster's head pod
    (its dashboard port is the local cluster's), the job submitted to the head's Jobs API under
    ``status.jobId`` with the RayJob's entrypoint and runtime env, and its status polled there."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    def on_create(rayjob: dict) -> None:
        name = rayjob["metadata"]["name"]
        spec = rayjob["spec"]
        assert spec["submissionMode"] == "HTTPMode"
        ray_cluster = f"{name}-local"
        job_id = f"{name}-01"

        def run() -> None:
            status = {
                "jobDeploymentStatus": "Initializing",
                "rayClusterName": ray_cluster,
                "startTime": "2026-12-03T11:00:01Z",
            }
            api.state.rayjobs[(NS, name)]["status"] = status
            api.add_head(head_pod(ray_cluster, namespace=NS), ("127.0.0.1", cluster.dashboard_port))
            client = JobSubmissionClient(cluster.dashboard_url)
            client.submit_job(
                entrypoint=spec["entrypoint"],
                submission_id=job_id,
                runtime_env=json.loads(spec["runtimeEnvYAML"]),
            )
            status = {**status, "jobId": job_id}
            api.state.rayjobs[(NS, name)]["status"] = {
                **status,
                "jobDeploymentStatus": "Running",
                "jobStatus": "RUNNING",
            }
            while not (state := client.get_job_status(job_id)).is_terminal():
                time.sleep(0.5)
            ok = state == JobStatus.SUCCEEDED
            api.state.rayjobs[(NS, name)]["status"] = {
                **status,
                "jobDeploymentStatus": "Complete" if ok else "Failed",
                "jobStatus": "SUCCEEDED" if ok else "FAILED",
                "endTime": "2026-12-03T11:01:00Z",
            }

        threading.Thread(target=run, daemon=True).start()

    return on_create


def test_a_new_users_script_runs_from_s3_and_its_output_comes_back(tmp_path, s3, monkeypatch):
    dev = parse_environment(env_data("dev"), source="test")
    aws_env = {
        "AWS_ENDPOINT_URL": s3,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    for k, v in aws_env.items():
        monkeypatch.setenv(k, v)
    bucket = dev.bucket_names()["checkpoints"]
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=bucket)

    project = tmp_path / "my-first-job"
    project.mkdir()
    (project / "train.py").write_text(TRAIN)
    (project / "helper.py").write_text(HELPER)

    # `python` of the entrypoint is the image's Python, which has Ray: here, this venv's.
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
    cluster = LocalCluster(
        worker_nodes=1,
        cpus_per_node=1,
        memory_per_node_mib=1536,
        object_store_per_node_mib=256,
        dashboard=True,
        env_extra={**aws_env, "PATH": path},
    )
    with cluster, KubeApi() as api:
        api.state.on_create = kuberay_stand_in(api, cluster)
        common = {
            "load_config": lambda n: dev,
            "aws_factory": lambda c, p: Aws(REGION),
            "kube_factory": lambda a, c, args: api.client(),
            "prog": "hpray",
        }
        out = io.StringIO()
        code = main(
            [
                "submit",
                "job",
                "--env",
                "dev",
                "--working-dir",
                str(project),
                "--name",
                "first-job",
                "--poll-seconds",
                "1",
                "--timeout-minutes",
                "5",
                "--json",
                "--",
                "python",
                "train.py",
            ],
            out=out,
            **common,
        )
        events = [json.loads(line) for line in out.getvalue().splitlines()]
        assert code == 0, out.getvalue()

        uri = next(e["uri"] for e in events if e.get("event") == "uploaded")
        assert uri.startswith(f"s3://{bucket}/jobs/first-job/working-dir-") and uri.endswith(".zip")
        progress = [e for e in events if e.get("event") == "progress"][-1]
        assert (progress["step"], progress["total_steps"], progress["loss"], progress["last_checkpoint"]) == (
            3,
            3,
            0.333,
            3,
        )
        assert events[-1]["event"] == "done" and events[-1]["succeeded"] is True

        out = io.StringIO()
        assert main(["logs", "first-job", "--env", "dev", "--follow"], out=out, **common) == 0
        lines = out.getvalue().splitlines()
        assert "driver says hello from my own code" in lines
        assert "worker says hello from my own code" in lines
        assert "checkpoint saved at step 3 in /fsx/checkpoints/jobs/first-job" in lines
        assert lines[-1] == "RayJob ray-workloads/first-job is Complete/SUCCEEDED"
        # Both read the driver's log from the head's Jobs API through the API's pod port-forward.
        assert set(api.state.port_forwards) == {(NS, "first-job-local-head-8xk2q", 8265)}

        # `hpray dashboard`: a local port relayed through the API's port-forward to the real
        # dashboard; the Jobs API answers through it as on the head.
        shown = io.StringIO()
        threading.Thread(
            target=main,
            args=(["dashboard", "first-job", "--env", "dev", "--port", "0", "--json"],),
            kwargs={**common, "out": shown},
            daemon=True,  # serves until Ctrl-C; its listener goes with the test process
        ).start()
        deadline = time.monotonic() + 30
        while not shown.getvalue().endswith("\n") and time.monotonic() < deadline:
            time.sleep(0.1)
        info = json.loads(shown.getvalue())
        assert (info["pod"], info["auth"]) == ("first-job-local-head-8xk2q", False)
        with urllib.request.urlopen(f"{info['url']}/api/jobs/first-job-01", timeout=30) as r:
            job = json.loads(r.read())
        assert (job["submission_id"], job["status"]) == ("first-job-01", "SUCCEEDED")
        with urllib.request.urlopen(f"{info['url']}/api/version", timeout=30) as r:
            assert json.loads(r.read())["ray_version"] == ray.__version__
        assert api.state.port_forwards.count((NS, "first-job-local-head-8xk2q", 8265)) >= 4
