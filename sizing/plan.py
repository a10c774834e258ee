"""The environment's plan: for each workload its name, instance group, node and worker counts and
pod shape, and the train loop's settings, derived once per loaded config (``plan_of``).

Manifests, NetworkPolicies, the flow table, ``hpray submit job``, the review's placement and
sizing tables read the plan; the placement, autoscaling and checkpoint burst checks
(sizing/placement.py, sizing/autoscaling.py, sizing/storage.py) run over it once the config has
loaded (sizing/check.py, which every entry point calls). The training
plan's ``checkpoint`` holds one checkpoint's bytes, its write time at FSx's throughput, the
estimated step time (and the MFU it assumes) and the run's goodput sweep (sizing/goodput.py).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, replace

from config import catalog
from config.environment import EnvironmentConfig
from config.hyperpod import InstanceGroup
from config.job_settings import JobSettings, job_settings
from sizing import goodput, pods, storage, training
from sizing.pods import HeadShape, WorkerShape
from sizing.storage import CheckpointSizing
from sizing.training import TrainingPlacement


@dataclass(frozen=True)
class TrainingPlan:
    """The RayJob of ``training:``: its workers on one instance group, and the train loop's
    settings (the ``training:`` fields it takes and what the cluster decides: workers, CPUs per
    worker, storage path, placement strategy), which the RayJob passes to the job as they are."""

    name: str
    group: InstanceGroup
    placement: TrainingPlacement
    worker: WorkerShape
    # The head pod, sized for the worker nodes it serves (sizing/pods.py training_head).
    head: HeadShape
    settings: JobSettings
    # One checkpoint's bytes and write time against FSx, and the run's goodput sweep.
    checkpoint: CheckpointSizing

    @property
    def worker_group(self) -> str:
        """The RayJob's worker group: named after its instance group."""
        return self.group.name


@dataclass(frozen=True)
class ServicePlan:
    """A RayService: its name and its worker pods on one instance group, in the Ray worker group
    ``worker_group`` (the instance group's name and the role the pods play on it)."""

    name: str
    group: InstanceGroup
    worker: WorkerShape
    worker_group: str


@dataclass(frozen=True)
class Plan:
    """Everything sized from one environment's config. ``training`` is None when ``training:``
    does not fit its group (``training_problems`` says why, one line each) or there is no GPU
    group to train on; ``serve`` and ``llm`` are None when they have no group to run on."""

    training: TrainingPlan | None
    training_problems: tuple[str, ...]
    serve: ServicePlan | None
    llm: ServicePlan | None
    # One whole node's worker pod of an ``hpray submit job`` RayJob, per GPU instance group.
    job_workers: Mapping[str, WorkerShape]

    @property
    def checkpoint(self) -> CheckpointSizing | None:
        """The training job's checkpoint against FSx and its goodput sweep (None: no training job)."""
        return None if self.training is None else self.training.checkpoint

    def job_worker(self, group: str, nodes: int) -> WorkerShape:
        """The worker pods of a submitted job on ``nodes`` whole nodes of ``group``."""
        return replace(self.job_workers[group], min_replicas=nodes, max_replicas=nodes)


def _training(env: EnvironmentConfig) -> tuple[TrainingPlan | None, tuple[str, ...]]:
    """The training job's plan, or the problems of ``training:`` against its group. Its workers
    are placed here (per node: the group's GPUs over each worker's; nodes: the workers over
    that), its worker pod sized from them, and the train loop's settings built from both."""
    t, groups = env.training, env.hyperpod.instance_groups
    problems = tuple(t.group_problems(groups))
    if problems:
        return None, problems
    group = t.group(groups)
    assert group is not None, "group_problems reports a missing group"
    spec = catalog.instance_spec(group.instance_type)
    per_node = spec.gpus // t.gpus_per_worker if t.gpus_per_worker else 1
    workers = t.num_workers or per_node * group.instance_count
    p = TrainingPlacement(
        group=group.name,
        instance_type=group.instance_type,
        workers=workers,
        nodes=math.ceil(workers / per_node),
        workers_per_node=per_node,
        gpus_per_worker=t.gpus_per_worker,
        gpus_per_node=spec.gpus,
        efa_interfaces=spec.efa_interfaces,
        vcpus=spec.vcpus,
        memory_gib=spec.memory_gib,
    )
    problems = tuple(training.fit_problems(t, p, group, fsx_file_system_path=env.fsx.file_system_path))
    if problems:
        return None, problems
    try:
        worker = pods.training_worker(env, p)
    except KeyError:  # no ENI limits for the group: sizing.placement.pool_problems says so
        return None, problems
    settings = job_settings(
        t,
        storage_path=t.resolved_storage_path(env.fsx.file_system_path),
        num_workers=p.workers,
        # The worker pod's CPUs (sized from the node's allocatable) shared by its Ray Train workers.
        cpus_per_worker=max(1, worker.cpus // worker.per_pod),
        placement_strategy="SPREAD" if p.nodes > 1 else "PACK",
    )
    return (
        TrainingPlan(
            name=f"train-{t.run_name}",
            group=group,
            placement=p,
            worker=worker,
            head=pods.training_head(worker.max_replicas),
            settings=settings,
            checkpoint=storage.checkpoint_sizing(
                t,
                p,
                env.fsx,
                node_mtbf_hours=env.hyperpod.node_mtbf_hours,
                node_replacement_seconds=env.hyperpod.node_replacement_seconds,
            ),
        ),
        problems,
    )


def _services(env: EnvironmentConfig) -> tuple[ServicePlan | None, ServicePlan | None]:
    inf = env.inference
    try:
        group = inf.resolved_instance_group(env.hyperpod)
        serve = ServicePlan(f"{env.name_prefix}-{inf.app_name}", group, pods.serve_worker(env), f"{group.name}-serve")
    except KeyError:  # no GPU group, or no hardware facts for it: the config checks say which
        return None, None
    if not inf.llm.enabled:
        return serve, None
    try:
        group = inf.resolved_llm_group(env.hyperpod)
        return serve, ServicePlan(f"{env.name_prefix}-llm", group, pods.llm_worker(env), f"{group.name}-llm")
    except KeyError:
        return serve, None


def derive(env: EnvironmentConfig) -> Plan:
    """The plan of ``env``; call ``plan_of``, which derives it once per config."""
    train, train_problems = _training(env)
    serve, llm = _services(env)
    jobs = {g.name: pods.job_worker(env, g, 1) for g in env.hyperpod.instance_groups if g.is_gpu and pods.known(g)}
    return Plan(training=train, training_problems=train_problems, serve=serve, llm=llm, job_workers=jobs)


_PLANS: dict[int, Plan] = {}


def plan_of(env: EnvironmentConfig) -> Plan:
    """The plan of ``env``, derived on the first call for this config object (a config is
    frozen: a changed one, e.g. with command-line overrides, is another object and another plan)."""
    key = id(env)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = derive(env)
        weakref.finalize(env, _PLANS.pop, key, None)
    return plan


def checkpoint_interval_warning(env: EnvironmentConfig) -> str | None:
    """The synth warning of a production environment whose checkpoint interval is far from the
    Young/Daly optimum (sizing/goodput.py); None otherwise. Other environments checkpoint often
    on purpose, to exercise saves and restores within short runs: the sizing table shows their
    figures without a warning."""
    c = plan_of(env).checkpoint
    if not env.production or c is None or c.goodput is None:
        return None
    return goodput.warning(c.goodput)
