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
from manifests import crd, image, k8s, registry
from manifests.training import render

ENVS = ["dev", "staging", "prod"]


@pytest.fixture(scope="module", params=ENVS)
def env_and_job(request):
    cfg = load_environment(request.param)
    return cfg, render(cfg)


def test_valid_against_kuberay_crd_strictly(env_and_job):
    _, job = env_and_job
    assert crd.validate(job) == []


def test_strict_validation_rejects_unknown_and_mistyped_fields(env_and_job):
    _, job = env_and_job
    bad = copy.deepcopy(job)
    bad["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["imagePullPolcy"] = (
        "Always"
    )
    bad["spec"]["deletionStrategy"]["deletionRules"][0]["condition"]["ttlSecond"] = 1
    bad["spec"]["activeDeadlineSeconds"] = "soon"
    assert crd.validate(bad) == [
        "unknown field spec.deletionStrategy.deletionRules[0].condition.ttlSecond",
        "unknown field spec.rayClusterSpec.workerGroupSpecs[0].template.spec.containers[0].imagePullPolcy",
        "spec.activeDeadlineSeconds: 'soon' is not of type 'integer'",
    ]


def test_workers_come_from_the_hyperpod_group(env_and_job):
    cfg, job = env_and_job
    placement = registry.plan_of(cfg).training.placement
    group = cfg.hyperpod.group(placement.group)
    spec = instance_spec(group.instance_type)
    (wg,) = job["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    pod = wg["template"]["spec"]
    container = pod["containers"][0]
    assert wg["groupName"] == group.name
    # One pod per node the workers need (dev and staging train on part of a group they share
    # with serving, prod fills its training group).
    assert wg["replicas"] == wg["minReplicas"] == wg["maxReplicas"] == placement.nodes
    assert pod["nodeSelector"] == {
        "node.kubernetes.io/instance-type": group.instance_type,
        "sagemaker.amazonaws.com/node-health-status": "Schedulable",
    }
    limits = container["resources"]["limits"]
    pod_gpus = min(placement.workers, placement.workers_per_node) * placement.gpus_per_worker
    assert limits["nvidia.com/gpu"] == str(pod_gpus)
    if spec.efa_interfaces * pod_gpus // spec.gpus:
        assert limits["vpc.amazonaws.com/efa"] == str(spec.efa_interfaces * pod_gpus // spec.gpus)
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["FI_PROVIDER"] == "efa" and env["FI_EFA_FORK_SAFE"] == "1"
    else:
        assert "vpc.amazonaws.com/efa" not in limits
    assert {"name": "fsx", "mountPath": "/fsx"} in container["volumeMounts"]
    assert {"name": "fsx", "persistentVolumeClaim": {"claimName": "fsx-claim"}} in pod["volumes"]
    assert pod["serviceAccountName"] == k8s.SERVICE_ACCOUNT == "ray-workloads"
    # The job asks Ray Train for exactly the GPUs the pods bring.
    settings = json.loads(shlex.split(job["spec"]["entrypoint"])[-1])
    assert settings["num_workers"] * settings["gpus_per_worker"] == placement.workers * placement.gpus_per_worker
    assert settings["num_workers"] <= placement.nodes * min(placement.workers, placement.workers_per_node)


def test_head_lifecycle_and_limits(env_and_job):
    cfg, job = env_and_job
    spec = job["spec"]
    head = spec["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    assert head["nodeSelector"] == {"eks.amazonaws.com/nodegroup": "system"}
    assert head["containers"][0]["image"] == (cfg.training.image or image.image_uri(cfg.account, cfg.region))
    assert spec["rayClusterSpec"]["rayVersion"] == "2.60.0"
    assert spec["submissionMode"] == "HTTPMode"
    assert "shutdownAfterJobFinishes" not in spec and "ttlSecondsAfterFinished" not in spec
    assert spec["activeDeadlineSeconds"] == cfg.training.active_deadline_seconds
    assert "submitterConfig" not in spec and "submitterPodTemplate" not in spec  # no submitter in HTTPMode
    assert job["metadata"]["namespace"] == "ray-workloads"


def test_prod_p5_group():
    job = render(load_environment("prod"))
    (wg,) = job["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    limits = wg["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert (wg["groupName"], wg["replicas"], limits["nvidia.com/gpu"], limits["vpc.amazonaws.com/efa"]) == (
        "train-p5",
        4,
        "8",
        "32",
    )
    env = {e["name"]: e["value"] for e in wg["template"]["spec"]["containers"][0]["env"]}
    assert env["FI_EFA_USE_DEVICE_RDMA"] == "1"


def test_cli_prints_the_same_manifest():
    out = subprocess.run(
        [sys.executable, "-m", "manifests", "render", "training", "--env", "prod"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert yaml.safe_load(out.stdout) == render(load_environment("prod"))


def test_cli_unknown_environment():
    out = subprocess.run(
        [sys.executable, "-m", "manifests", "render", "training", "--env", "nope"], capture_output=True, text=True
    )
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


def _kuberay_rayjob_problems(spec: dict) -> list[str]:
    """The checks KubeRay 1.7's admission (utils/validation.go ValidateRayJobSpec,
    validateDeletionConfiguration, validateDeletionRules, validateTTLConsistency) makes on the
    fields this app sets; the CRD schema alone does not carry them."""
    problems = []
    rules = (spec.get("deletionStrategy") or {}).get("deletionRules") or []
    if not spec.get("shutdownAfterJobFinishes") and spec.get("ttlSecondsAfterFinished", 0) > 0:
        problems.append("ttlSecondsAfterFinished needs shutdownAfterJobFinishes")
    if rules and spec.get("shutdownAfterJobFinishes"):
        problems.append("shutdownAfterJobFinishes and deletionRules are mutually exclusive")
    if spec.get("submissionMode") == "SidecarMode" and ("submitterPodTemplate" in spec or "submitterConfig" in spec):
        problems.append("SidecarMode takes no submitter template/config")
    autoscaling = (spec.get("rayClusterSpec") or {}).get("enableInTreeAutoscaling")
    seen: dict[tuple, dict[str, int]] = {}
    for i, rule in enumerate(rules):
        cond = rule["condition"]
        if ("jobStatus" in cond) == ("jobDeploymentStatus" in cond):
            problems.append(f"deletionRules[{i}]: exactly one of jobStatus/jobDeploymentStatus")
            continue
        if autoscaling and rule["policy"] == "DeleteWorkers":
            problems.append(f"deletionRules[{i}]: DeleteWorkers with autoscaling")
        key = (
            ("jobStatus", cond["jobStatus"])
            if "jobStatus" in cond
            else ("jobDeploymentStatus", cond["jobDeploymentStatus"])
        )
        if rule["policy"] in seen.setdefault(key, {}):
            problems.append(f"deletionRules[{i}]: duplicate {rule['policy']} for {key}")
        seen[key][rule["policy"]] = cond.get("ttlSeconds", 0)
    for key, ttls in seen.items():
        order = [ttls[p] for p in ("DeleteWorkers", "DeleteCluster", "DeleteSelf") if p in ttls]
        if order != sorted(order):
            problems.append(f"{key}: TTLs must not decrease from DeleteWorkers to DeleteCluster to DeleteSelf")
    for field in ("activeDeadlineSeconds", "preRunningDeadlineSeconds"):
        if field in spec and spec[field] <= 0:
            problems.append(f"{field} must be positive")
    return problems


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_rayjob_passes_kuberays_own_validation_and_cleans_up_in_stages(env):
    cfg = load_environment(env)
    spec = render(cfg)["spec"]
    assert _kuberay_rayjob_problems(spec) == []
    assert spec["preRunningDeadlineSeconds"] < spec["activeDeadlineSeconds"]
    rules = spec["deletionStrategy"]["deletionRules"]
    workers = {json.dumps(r["condition"], sort_keys=True) for r in rules if r["policy"] == "DeleteWorkers"}
    # The GPU workers go the moment the job ends, however it ends; the head after the TTL.
    assert {json.loads(c)["ttlSeconds"] for c in workers} == {0}
    ended = {r["condition"].get("jobStatus") or r["condition"].get("jobDeploymentStatus") for r in rules}
    assert ended == {"SUCCEEDED", "FAILED", "Failed"}
    assert {r["condition"]["ttlSeconds"] for r in rules if r["policy"] == "DeleteCluster"} == {
        cfg.training.ttl_seconds_after_finished
    }


def test_kuberay_validation_port_rejects_what_kuberay_rejects():
    spec = render(load_environment("dev"))["spec"]
    assert _kuberay_rayjob_problems({**spec, "shutdownAfterJobFinishes": True}) == [
        "shutdownAfterJobFinishes and deletionRules are mutually exclusive"
    ]
    rules = [
        {"policy": "DeleteCluster", "condition": {"jobStatus": "FAILED", "ttlSeconds": 0}},
        {"policy": "DeleteWorkers", "condition": {"jobStatus": "FAILED", "ttlSeconds": 60}},
    ]
    assert _kuberay_rayjob_problems({**spec, "deletionStrategy": {"deletionRules": rules}}) == [
        "('jobStatus', 'FAILED'): TTLs must not decrease from DeleteWorkers to DeleteCluster to DeleteSelf"
    ]
