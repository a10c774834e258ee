"""The RayJob rendered from each environment: strictly valid against the KubeRay v1.7.0 CRDs,
and worker/GPU/EFA counts equal to the HyperPod instance group the CDK app creates."""

from __future__ import annotations

import copy
import json
import shlex
import subprocess
import sys

import pytest
import yaml

from config import load_environment
from config.catalog import instance_spec
from workloads.common import crd, image, k8s
from workloads.training.manifest import render

ENVS = ["dev", "staging", "prod"]


@pytest.fixture(scope="module", params=ENVS)
def env_and_job(request):
    cfg = load_environment(request.param)
    return cfg, render(cfg)


def test_valid_against_kuberay_crd_strictly(env_and_job):
    _, job = env_and_job
    assert crd.CRD_DIR.exists(), f"KubeRay CRDs expected at {crd.CRD_DIR}"
    assert crd.validate(job) == []


def test_strict_validation_rejects_unknown_and_mistyped_fields(env_and_job):
    _, job = env_and_job
    bad = copy.deepcopy(job)
    bad["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["imagePullPolcy"] = "Always"
    bad["spec"]["submitterConfig"]["backofLimit"] = 1
    bad["spec"]["activeDeadlineSeconds"] = "soon"
    assert crd.validate(bad) == [
        "unknown field spec.submitterConfig.backofLimit",
        "unknown field spec.rayClusterSpec.workerGroupSpecs[0].template.spec.containers[0].imagePullPolcy",
        "spec.activeDeadlineSeconds: 'soon' is not of type 'integer'",
    ]


def test_workers_come_from_the_hyperpod_group(env_and_job):
    cfg, job = env_and_job
    placement = cfg.training.placement(cfg.hyperpod.instance_groups)
    group = cfg.hyperpod.group(placement.group)
    spec = instance_spec(group.instance_type)
    (wg,) = job["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    pod = wg["template"]["spec"]
    container = pod["containers"][0]
    assert wg["groupName"] == group.name
    assert wg["replicas"] == wg["minReplicas"] == wg["maxReplicas"] == group.instance_count
    assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": group.instance_type,
                                   "sagemaker.amazonaws.com/node-health-status": "Schedulable"}
    limits = container["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == str(spec.gpus)
    if spec.efa_interfaces:
        assert limits["vpc.amazonaws.com/efa"] == str(spec.efa_interfaces)
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["FI_PROVIDER"] == "efa" and env["FI_EFA_FORK_SAFE"] == "1"
    else:
        assert "vpc.amazonaws.com/efa" not in limits
    assert {"name": "fsx", "mountPath": "/fsx"} in container["volumeMounts"]
    assert {"name": "fsx", "persistentVolumeClaim": {"claimName": "fsx-claim"}} in pod["volumes"]
    assert pod["serviceAccountName"] == k8s.SERVICE_ACCOUNT == "ray-workloads"
    # The job asks Ray Train for exactly the GPUs the pods bring.
    settings = json.loads(shlex.split(job["spec"]["entrypoint"])[-1])
    assert settings["num_workers"] * settings["gpus_per_worker"] == group.instance_count * spec.gpus


def test_head_lifecycle_and_limits(env_and_job):
    cfg, job = env_and_job
    spec = job["spec"]
    head = spec["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    assert head["nodeSelector"] == {"eks.amazonaws.com/nodegroup": "system"}
    assert head["containers"][0]["image"] == (cfg.training.image or image.image_uri(cfg.account, cfg.region))
    assert spec["rayClusterSpec"]["rayVersion"] == "2.60.0"
    assert spec["shutdownAfterJobFinishes"] is True
    assert spec["ttlSecondsAfterFinished"] == cfg.training.ttl_seconds_after_finished
    assert spec["activeDeadlineSeconds"] == cfg.training.active_deadline_seconds
    assert spec["submitterConfig"] == {"backoffLimit": cfg.training.submitter_backoff_limit}
    assert job["metadata"]["namespace"] == "ray-workloads"


def test_prod_p5_group():
    job = render(load_environment("prod"))
    (wg,) = job["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    limits = wg["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert (wg["groupName"], wg["replicas"], limits["nvidia.com/gpu"], limits["vpc.amazonaws.com/efa"]) == (
        "train-p5", 4, "8", "32")
    env = {e["name"]: e["value"] for e in wg["template"]["spec"]["containers"][0]["env"]}
    assert env["FI_EFA_USE_DEVICE_RDMA"] == "1"


def test_cli_prints_the_same_manifest():
    out = subprocess.run([sys.executable, "-m", "workloads", "render", "training", "--env", "prod"],
                         capture_output=True, text=True, check=True)
    assert yaml.safe_load(out.stdout) == render(load_environment("prod"))


def test_cli_unknown_environment():
    out = subprocess.run([sys.executable, "-m", "workloads", "render", "training", "--env", "nope"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and out.stdout == ""
    assert "unknown environment 'nope'; known environments: dev, prod, staging" in out.stderr


def test_ray_overhead_settings_on_every_node(env_and_job):
    """The settings measured in bench/training_throughput.py reach every `ray start` (head and
    GPU workers: each node runs a log monitor) and the job's runtime env."""
    _, job = env_and_job
    cluster = job["spec"]["rayClusterSpec"]
    pods = [cluster["headGroupSpec"]] + cluster["workerGroupSpecs"]
    wanted = {"RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0", "RAY_LOG_MONITOR_MANY_FILES_THRESHOLD": "0"}
    for pod in pods:
        env = {e["name"]: e["value"] for e in pod["template"]["spec"]["containers"][0]["env"]}
        assert {k: env.get(k) for k in wanted} == wanted
    runtime_env = yaml.safe_load(job["spec"]["runtimeEnvYAML"])
    assert {k: runtime_env["env_vars"].get(k) for k in wanted} == wanted
