"""The one RayJob builder: the training job (``manifests/training.py``), an ML engineer's own job
(``ops/submit/job.py``) and every RayJob workload of the registry (``render_job``) are all
rendered through :func:`ray_job`, so they share the submission mode, the deadlines and the pod
security of the Ray cluster."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from config import ConfigError
from config.environment import EnvironmentConfig
from manifests import image as image_mod
from manifests import k8s, security
from sizing.plan import JobPlan, Unplanned

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


def ray_job(
    *,
    metadata: dict[str, Any],
    entrypoint: str,
    runtime_env_yaml: str,
    head: dict[str, Any],
    workers: list[dict[str, Any]],
    workload: str,
    token_auth: bool,
    active_deadline_s: int,
    ttl_s: int,
    suspendable: bool = False,
) -> dict[str, Any]:
    """The ray.io/v1 RayJob running ``entrypoint`` on a Ray cluster of ``head`` and ``workers``,
    hardened for ``workload`` (``security.harden``).

    The cluster goes ``ttl_s`` after the job ends: in stages (the workers at once) by default; as
    a whole with ``suspendable``, which ``stop`` (suspend) needs: KubeRay 1.7 refuses to suspend a
    RayJob without shutdownAfterJobFinishes, and that excludes deletionRules (validation.go
    ValidateRayJobSpec).
    """
    cleanup: dict[str, Any] = (
        {"shutdownAfterJobFinishes": True, "ttlSecondsAfterFinished": ttl_s}
        if suspendable
        # Staged cleanup (RayJobDeletionPolicy, beta and on by default in KubeRay 1.7): the GPU
        # workers go as soon as the job ends, the head (system nodes, logs) after the TTL.
        # Rules exclude shutdownAfterJobFinishes and the global ttlSecondsAfterFinished.
        else {"deletionStrategy": {"deletionRules": deletion_rules(ttl_s)}}
    )
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": metadata,
        "spec": {
            "entrypoint": entrypoint,
            "runtimeEnvYAML": runtime_env_yaml,
            # HTTPMode: the operator submits the job to the head's dashboard and polls its status
            # (KubeRay 1.7 rayjob_controller.go). K8sJobMode and SidecarMode tie the RayJob to a
            # `ray job submit` process that follows the logs: once it ends (a dropped log stream
            # included) the RayJob is Failed 30 s later (DefaultSubmitterFinishedTimeout), whatever
            # the Ray job is doing. In HTTPMode a job the head no longer knows (head restarted) is
            # submitted again with the same ID, and the run resumes from its last checkpoint.
            "submissionMode": "HTTPMode",
            # A new RayCluster per retry would only repeat what Ray Train already does.
            "backoffLimit": 0,
            "activeDeadlineSeconds": active_deadline_s,
            # Pods that cannot be scheduled (no healthy node, no GPUs free) fail the RayJob with
            # reason PreRunningDeadlineExceeded instead of waiting for activeDeadlineSeconds.
            "preRunningDeadlineSeconds": PRE_RUNNING_DEADLINE_S,
            **cleanup,
            "rayClusterSpec": security.harden(
                {"rayVersion": k8s.RAY_VERSION, "headGroupSpec": head, "workerGroupSpecs": workers},
                workload=workload,
                token_auth=token_auth,
            ),
        },
    }


def render_job(
    env: EnvironmentConfig,
    plan: JobPlan | Unplanned | None,
    *,
    key: str,
    app: str,
    module: str,
    ray_env: Mapping[str, str] | None = None,
    args: Sequence[str] = (),
) -> dict[str, Any]:
    """The RayJob of registry workload ``key`` from its ``plan``: ``python -m <module> <args>`` (its
    runtime folder, shipped in the workloads image) on the head and workers the plan sizes, with
    the deadlines and image of ``hpray submit job`` RayJobs (``training.*``). Raises ConfigError
    with the reason the plan keeps where it has none."""
    if not isinstance(plan, JobPlan):
        reasons = list(plan.problems) if plan is not None else []
        raise ConfigError(f"{env.name}.yaml", reasons or [f"{key}: not deployed in {env.name}.yaml"])
    image = image_mod.resolve(env, env.training.image, "training.image")
    variables = dict(ray_env or {})
    return ray_job(
        metadata=k8s.metadata(plan.name, app),
        entrypoint=shlex.join(["python", "-m", module, *args]),
        runtime_env_yaml=k8s.runtime_env_yaml(variables),
        head=k8s.head_group(image, app=app, env=k8s.env_list(variables) or None, resources=plan.head.resources),
        workers=[
            k8s.worker_group(
                plan.worker,
                group_name=plan.worker_group,
                image=image,
                app=app,
                taints=list(plan.group.taints),
                env=k8s.env_list(variables),
            )
        ],
        workload=plan.name,
        token_auth=env.eks.ray_token_auth,
        active_deadline_s=env.training.active_deadline_seconds,
        ttl_s=env.training.ttl_seconds_after_finished,
    )
