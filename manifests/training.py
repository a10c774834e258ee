"""The RayJob that runs the training job on the HyperPod cluster, rendered from the config.

Worker pods, GPUs and EFA interfaces come from the HyperPod instance group the CDK app creates
(``training.instance_group``), so the job and the infrastructure cannot drift.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from config import ConfigError
from config.environment import EnvironmentConfig
from config.facts.names import TRAINING_APP
from config.job_settings import JobSettings
from manifests import image as image_mod
from manifests import k8s, rayjob
from sizing.plan import TRAINING, TrainingPlan, Unplanned, training, workload_plan
from workloads.training import settings as settings_mod

APP = TRAINING_APP

# Environment of every Ray process of the job; figures behind each setting: docs/benchmarks.md,
# "Ray settings of the training job".
# - The Train controller's poll stays at Ray's default (2 s): reports here are seconds apart, and
#   reporter.ReportPacing says so in the job log if they ever come faster.
# - No PreemptionWatcher actor per worker group: nothing drains Ray nodes here (HyperPod replaces
#   a failed node, which FailureConfig handles as a node loss).
# - The log monitors look for new log files every 0.5 s instead of every pass: less CPU on every node.
# - Workers keep Ray's nice 15, so a node's raylet and agents stay ahead of busy workers.
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


def training_plan(cfg: EnvironmentConfig) -> TrainingPlan:
    """The training job's plan of ``cfg`` (raises ConfigError when ``training:`` does not fit)."""
    plan = workload_plan(cfg, TRAINING, training)
    if isinstance(plan, Unplanned):
        raise ConfigError(f"{cfg.name}.yaml", list(plan.problems))
    assert isinstance(plan, TrainingPlan), "the training job is always planned or unplanned"
    return plan


def for_cluster(cfg: EnvironmentConfig, overrides: dict[str, Any] | None = None) -> JobSettings:
    """Settings of the job on the HyperPod cluster of ``cfg`` (with ``overrides`` of its
    ``training:`` section: another config, planned anew): the plan's."""
    if overrides:
        t = settings_mod.training_with(cfg.training, overrides, f"config/{cfg.name}.yaml")
        cfg = cfg.model_copy(update={"training": t})
    return training_plan(cfg).settings


def render(cfg: EnvironmentConfig) -> dict[str, Any]:
    """The ray.io/v1 RayJob for ``cfg`` (raises ConfigError when the config does not fit)."""
    t = cfg.training
    plan = training_plan(cfg)
    group = plan.group
    image = image_mod.resolve(cfg, t.image, "training.image")
    # The plan's train-loop settings as they are: the job parses them (workloads/training/__main__.py).
    settings_json = json.dumps(plan.settings.to_dict(), sort_keys=True, separators=(",", ":"))
    entrypoint = f"python -m workloads.training --settings-json {shlex.quote(settings_json)}"
    env = k8s.env_list(RAY_ENV)
    name = plan.name  # the plan names it (config.facts.names.training_job_name)
    return rayjob.ray_job(
        metadata=k8s.metadata(name, APP),
        entrypoint=entrypoint,
        runtime_env_yaml=k8s.runtime_env_yaml(RAY_ENV),
        head=k8s.head_group(image, app=APP, env=env + k8s.env_list(GCS_ENV), resources=plan.head.resources),
        workers=[
            k8s.worker_group(
                plan.worker,
                group_name=plan.worker_group,
                image=image,
                app=APP,
                taints=group.taints,
                env=env,
            )
        ],
        workload=name,
        token_auth=cfg.eks.ray_token_auth,
        active_deadline_s=t.active_deadline_seconds,
        ttl_s=t.ttl_seconds_after_finished,
    )
