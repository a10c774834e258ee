"""The RayJob that runs the training job on the HyperPod cluster, rendered from the config.

Worker pods, GPUs and EFA interfaces come from the HyperPod instance group the CDK app creates
(``training.instance_group``), so the job and the infrastructure cannot drift.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from config.environment import EnvironmentConfig
from sizing.plan import plan_of
from workloads.common import image as image_mod
from workloads.common import k8s, security
from workloads.training import settings as settings_mod

APP = "ray-train"

# Environment of every Ray process of the job. The Train controller's poll
# (RAY_TRAIN_HEALTH_CHECK_INTERVAL_S) stays at Ray's default, 2 s: the controller takes one
# report per worker per poll and `report()` blocks until the previous one is taken, which
# paces training only when reports come faster than the polls (every 50 GPU steps here:
# several seconds; locally, 10 CPU steps in ~1.5 s, it did: settings.LOCAL_RAY_ENV). If that
# ever happens here, train_func says so once in the job log (job.ReportPacing). A shorter
# poll costs CPU on every worker all the time to save at most 2 s per node loss (measured in
# bench/training_throughput.py and bench/training_recovery.py; bench/README.md).
#
# RAY_TRAIN_ENABLE_PREEMPTION_WATCHER=0: Ray Train 2.60 starts one more actor per worker group,
# a PreemptionWatcher that asks the GCS every 5 s for nodes Ray is draining and, if one of ours
# is, marks the workers so that `ray.train.get_preemption_info()` can see it. Nothing drains Ray
# nodes here (no Ray autoscaler in this RayJob; HyperPod replaces a failed node, which Ray sees
# as a node loss, handled by FailureConfig) and train_func never asks; the actor's process costs
# ~5 ms of CPU per second like any idle Ray worker process, and with no CPU of its own it can land
# on a GPU node (it did locally).
# RAY_LOG_MONITOR_MANY_FILES_THRESHOLD=0: every node's log monitor (on the GPU nodes too) looks
# for new log files with a glob of the logs dir on each 100 ms pass while the dir holds fewer than
# this many files (Ray's default 1000), else every LOG_NAME_UPDATE_INTERVAL_S (0.5 s); 0 takes
# the 0.5 s path always. New log files (new worker processes) are picked up up to 0.5 s later;
# the lines of known files are still forwarded every pass. Measured locally: the log monitor's
# CPU 10.5 -> 4.5 ms per second. Both in bench/training_throughput.py (bench/README.md).
# Measured and left at Ray's default: RAY_worker_niceness (15 for every worker process, the ranks
# too). Starting the workers at nice 0 did not make training faster locally (interleaved A/B,
# 5 blocks, 2026-12-02: 0.995 of the nice-15 throughput), and nice 15 keeps a node's raylet
# and agents ahead of busy workers.
RAY_ENV = {
    "RAY_TRAIN_V2_ENABLED": "1",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
    "RAY_LOG_MONITOR_MANY_FILES_THRESHOLD": "0",
}
# Node-loss detection in the GCS (head only): a raylet missing 5 health checks 2 s apart is
# declared dead after ~10 s (Ray's default: 5 x 3 s). Safe on EKS: checks are gRPC round trips
# inside the VPC; not lower, a loaded head must not declare healthy nodes dead.
GCS_ENV = {
    "RAY_health_check_period_ms": "2000",
    "RAY_health_check_failure_threshold": "5",
}


# Time from the RayJob's start to a Running cluster: node scheduling, the image pull (several GB)
# and Ray start on every worker. 30 min is far above a healthy start and far below a run.
PRE_RUNNING_DEADLINE_S = 1800


def deletion_rules(ttl_s: int) -> list[dict[str, Any]]:
    """Workers at once, the cluster after ``ttl_s``, for a succeeded or failed Ray job and for a
    RayJob that failed before or around its Ray job (deadlines, submission)."""
    rules = []
    for condition in ({"jobStatus": "SUCCEEDED"}, {"jobStatus": "FAILED"}, {"jobDeploymentStatus": "Failed"}):
        rules.append({"policy": "DeleteWorkers", "condition": {**condition, "ttlSeconds": 0}})
        rules.append({"policy": "DeleteCluster", "condition": {**condition, "ttlSeconds": ttl_s}})
    return rules


def render(cfg: EnvironmentConfig) -> dict[str, Any]:
    """The ray.io/v1 RayJob for ``cfg`` (raises ConfigError when the config does not fit)."""
    t = cfg.training
    job = settings_mod.for_cluster(cfg)
    plan = plan_of(cfg).training
    assert plan is not None, "for_cluster reports a training job that does not fit"
    group = plan.group
    image = image_mod.resolve(cfg, t.image, "training.image")
    settings_json = json.dumps(job.to_dict(), sort_keys=True, separators=(",", ":"))
    entrypoint = f"python -m workloads.training --settings-json {shlex.quote(settings_json)}"
    env = k8s.env_list(RAY_ENV)
    name = plan.name
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": k8s.metadata(name, APP),
        "spec": {
            "entrypoint": entrypoint,
            "runtimeEnvYAML": k8s.runtime_env_yaml(RAY_ENV),
            # HTTPMode: the operator submits the job to the head's dashboard and polls its status
            # (KubeRay 1.7 rayjob_controller.go). K8sJobMode and SidecarMode tie the RayJob to a
            # `ray job submit` process that follows the logs: once it ends (a dropped log stream
            # included) the RayJob is Failed 30 s later (DefaultSubmitterFinishedTimeout), whatever
            # the Ray job is doing. In HTTPMode a job the head no longer knows (head restarted) is
            # submitted again with the same ID, and the run resumes from its last checkpoint.
            "submissionMode": "HTTPMode",
            # A new RayCluster per retry would only repeat what Ray Train already does.
            "backoffLimit": 0,
            "activeDeadlineSeconds": t.active_deadline_seconds,
            # Pods that cannot be scheduled (no healthy node, no GPUs free) fail the RayJob with
            # reason PreRunningDeadlineExceeded instead of waiting for activeDeadlineSeconds.
            "preRunningDeadlineSeconds": PRE_RUNNING_DEADLINE_S,
            # Staged cleanup (RayJobDeletionPolicy, beta and on by default in KubeRay 1.7): the GPU
            # workers go as soon as the job ends, the head (system nodes, logs) after the TTL.
            # Rules exclude shutdownAfterJobFinishes and the global ttlSecondsAfterFinished.
            "deletionStrategy": {"deletionRules": deletion_rules(t.ttl_seconds_after_finished)},
            "rayClusterSpec": security.harden(
                {
                    "rayVersion": k8s.RAY_VERSION,
                    "headGroupSpec": k8s.head_group(image, app=APP, env=env + k8s.env_list(GCS_ENV)),
                    "workerGroupSpecs": [
                        k8s.worker_group(
                            plan.worker,
                            group_name=group.name,
                            image=image,
                            app=APP,
                            taints=group.taints,
                            env=env,
                        )
                    ],
                },
                workload=name,
                token_auth=cfg.eks.ray_token_auth,
            ),
        },
    }
