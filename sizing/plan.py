"""The environment's plan: for each workload its name, instance group, node and worker counts, pod
shape and Ray demands, and the train loop's settings, derived once per loaded config and set of
plan functions (``plan_of``).

``Plan.workloads`` maps each workload's key (manifests/registry.py) to its plan (``JobPlan``,
``TrainingPlan``, ``ServicePlan``) or ``Unplanned`` with the reason it has none, in the registry's
order; ``training``, ``inference`` and ``llm`` are the built-in workloads' plan functions and
``whole_node_job`` makes one for a RayJob on whole nodes. Manifests, NetworkPolicies, the flow
table, ``hpray submit job``, the review's placement and sizing tables read the plan; the
placement, autoscaling and checkpoint burst checks (sizing/placement.py, sizing/autoscaling.py,
sizing/storage.py) take it as an argument. The training plan's ``checkpoint`` holds one
checkpoint's bytes, its write time at FSx's throughput, the estimated step time (and the MFU it
assumes) and the run's goodput sweep (sizing/goodput.py).

One module because every workload's plan function and the plan they make share the plan types,
the pod shapes and the demand each one declares; split per workload, each would import the
others' types back.
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from config import catalog
from config.environment import EnvironmentConfig
from config.facts import names
from config.hyperpod import InstanceGroup, default_gpu_group
from config.job_settings import JobSettings, job_settings
from sizing import goodput, pods, storage
from sizing import training as training_sizing
from sizing.demand import (
    LLM_INGRESS,
    LLM_SERVER,
    SERVE_DEFAULT_CPUS,
    SERVE_DEFAULT_MAX_REPLICAS,
    Demand,
    bundle,
    llm_replica_bundles,
)
from sizing.pods import HeadShape, WorkerShape
from sizing.storage import CheckpointSizing
from sizing.training import TrainingPlacement


@dataclass(frozen=True)
class WorkloadPlan:
    """One Ray workload of the environment: its name (from the config), its worker pods on one
    instance group in the Ray worker group ``worker_group``, and the bundles it asks Ray for at
    its maximum (``demands``, which the autoscaling check places). ``kind``: its KubeRay kind."""

    kind: ClassVar[str]
    name: str
    group: InstanceGroup
    worker: WorkerShape
    worker_group: str
    demands: tuple[Demand, ...]


@dataclass(frozen=True)
class JobPlan(WorkloadPlan):
    """A RayJob: its workers, and its head pod sized for the worker nodes it serves (no
    autoscaler: the job's workers are fixed)."""

    kind: ClassVar[str] = "RayJob"
    head: HeadShape


@dataclass(frozen=True)
class TrainingPlan(JobPlan):
    """The RayJob of ``training:``: its workers on one instance group, and the train loop's
    settings (the ``training:`` fields it takes and what the cluster decides: workers, CPUs per
    worker, storage path, placement strategy), which the RayJob passes to the job as they are.
    Its worker group is named after its instance group."""

    placement: TrainingPlacement
    settings: JobSettings
    # One checkpoint's bytes and write time against FSx, and the run's goodput sweep.
    checkpoint: CheckpointSizing
    # The same at the elastic run's shrink floor (training.min_workers); None: a fixed worker count.
    floor_checkpoint: CheckpointSizing | None = None


@dataclass(frozen=True)
class ServicePlan(WorkloadPlan):
    """A RayService: its name and its worker pods on one instance group, in the Ray worker group
    ``worker_group`` (the instance group's name and the role the pods play on it); its head is
    Ray's default one with the autoscaler beside it."""

    kind: ClassVar[str] = "RayService"


@dataclass(frozen=True)
class Unplanned:
    """A workload the config deploys that has no plan: ``problems`` says why, one line each (the
    renderer reports them; empty where another check reports the cause)."""

    kind: str
    name: str
    problems: tuple[str, ...]


# A workload's plan function: its plan in ``env``, the reason it has none, or None where the
# config does not deploy it (the LLM service while ``inference.llm.enabled`` is false).
PlanFn = Callable[[EnvironmentConfig], WorkloadPlan | Unplanned | None]
# (key, plan function) of each workload, in the order the plan, its checks and tables list them.
Planners = tuple[tuple[str, PlanFn], ...]

# The keys of the built-in workloads (manifests/registry.py: the render kinds of
# ``python -m manifests render`` and ``hpray submit``).
TRAINING = "training"
INFERENCE = "inference"
LLM = "inference-llm"
PRETOKENIZE = "pretokenize"
EXPORT = "export"
BATCH_INFERENCE = "batch-inference"
# The export (python -m workloads.export) runs as the RayJob's entrypoint on its head, a pod of
# the system nodes beside the training job, with no worker pods: it reads the run's checkpoint
# from FSx and holds one output shard's tensors (manifests/export.py MAX_SHARD_BYTES, 1 GiB)
# plus their fp32 sources and one converted tensor, well within this head.
EXPORT_HEAD = HeadShape(cpus=1, memory_gib=8)


@dataclass(frozen=True)
class Plan:
    """Everything sized from one environment's config. ``workloads``: each workload the config
    deploys, by key in the registry's order, with its plan or the reason it has none
    (``Unplanned``). ``training``, ``serve`` and ``llm`` are the built-in ones' plans (None:
    not deployed, or no plan)."""

    workloads: Mapping[str, WorkloadPlan | Unplanned]
    # One whole node's worker pod of an ``hpray submit job`` RayJob, per GPU instance group.
    job_workers: Mapping[str, WorkerShape]

    def planned(self) -> list[WorkloadPlan]:
        """The plans of the workloads that have one, in order."""
        return [w for w in self.workloads.values() if isinstance(w, WorkloadPlan)]

    def get(self, key: str) -> WorkloadPlan | None:
        w = self.workloads.get(key)
        return w if isinstance(w, WorkloadPlan) else None

    def problems(self, key: str) -> tuple[str, ...]:
        """Why workload ``key`` has no plan (empty: it has one, or is not deployed)."""
        w = self.workloads.get(key)
        return w.problems if isinstance(w, Unplanned) else ()

    @property
    def training(self) -> TrainingPlan | None:
        w = self.get(TRAINING)
        return w if isinstance(w, TrainingPlan) else None

    @property
    def training_problems(self) -> tuple[str, ...]:
        """Why ``training:`` has no plan: its problems against its group, one line each."""
        return self.problems(TRAINING)

    @property
    def serve(self) -> ServicePlan | None:
        w = self.get(INFERENCE)
        return w if isinstance(w, ServicePlan) else None

    @property
    def llm(self) -> ServicePlan | None:
        w = self.get(LLM)
        return w if isinstance(w, ServicePlan) else None

    @property
    def checkpoint(self) -> CheckpointSizing | None:
        """The training job's checkpoint against FSx and its goodput sweep (None: no training job)."""
        return None if self.training is None else self.training.checkpoint

    @property
    def floor_checkpoint(self) -> CheckpointSizing | None:
        """``checkpoint`` at ``training.min_workers`` (None: no training job, or no shrink floor)."""
        return None if self.training is None else self.training.floor_checkpoint

    def job_worker(self, group: str, nodes: int) -> WorkerShape:
        """The worker pods of a submitted job on ``nodes`` whole nodes of ``group``."""
        return replace(self.job_workers[group], min_replicas=nodes, max_replicas=nodes)


def training(env: EnvironmentConfig) -> TrainingPlan | Unplanned:
    """The training job's plan, or the problems of ``training:`` against its group. Its workers
    are placed here (per node: the group's GPUs over each worker's; nodes: the workers over
    that), its worker pod sized from them, and the train loop's settings built from both."""
    t, groups = env.training, env.hyperpod.instance_groups
    name = names.training_job_name(t.run_name)
    problems = tuple(t.group_problems(groups))
    if problems:
        return Unplanned("RayJob", name, problems)
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
    problems = tuple(training_sizing.fit_problems(t, p, group, fsx_file_system_path=env.fsx.file_system_path))
    if problems:
        return Unplanned("RayJob", name, problems)
    try:
        worker = pods.training_worker(env, p)
    except KeyError:  # no ENI limits for the group: sizing.placement.pool_problems says so
        return Unplanned("RayJob", name, ())
    floor = None
    if t.min_workers is not None and t.min_workers < p.workers:
        floor = dataclasses.replace(p, workers=t.min_workers, nodes=math.ceil(t.min_workers / per_node))
    settings = job_settings(
        t,
        storage_path=t.resolved_storage_path(env.fsx.file_system_path),
        num_workers=p.workers,
        # The worker pod's CPUs (sized from the node's allocatable) shared by its Ray Train workers.
        cpus_per_worker=max(1, worker.cpus // worker.per_pod),
        placement_strategy="SPREAD" if p.nodes > 1 else "PACK",
        peak_tflops_per_gpu=catalog.dense_bf16_tflops(group.instance_type) if t.gpus_per_worker else None,
        model_flops_per_token=training_sizing.flops_per_token(t.model),
    )
    # The bundles the job's ScalingConfig asks for (workloads/training/job.py scaling_config), from
    # the settings the RayJob passes it: Ray Train's worker group is one placement group of a bundle
    # per worker (PACK or SPREAD: the autoscaler places its bundles one by one).
    demand = Demand(
        "training.num_workers",
        "trainer (Ray Train workers)",
        settings.num_workers,
        "workers",
        (bundle(CPU=float(settings.cpus_per_worker), GPU=float(settings.gpus_per_worker)),),
        settings.placement_strategy,
    )
    return TrainingPlan(
        name=name,
        group=group,
        worker=worker,
        worker_group=group.name,
        demands=(demand,),
        head=pods.training_head(worker.max_replicas),
        placement=p,
        settings=settings,
        checkpoint=storage.checkpoint_sizing(
            t,
            p,
            env.fsx,
            node_mtbf_hours=env.hyperpod.node_mtbf_hours,
            node_replacement_seconds=env.hyperpod.node_replacement_seconds,
        ),
        floor_checkpoint=None
        if floor is None
        else storage.checkpoint_sizing(
            t,
            floor,
            env.fsx,
            node_mtbf_hours=env.hyperpod.node_mtbf_hours,
            node_replacement_seconds=env.hyperpod.node_replacement_seconds,
        ),
    )


def inference(env: EnvironmentConfig) -> ServicePlan | Unplanned:
    """The generation RayService's plan, or why it has none (no GPU group, or no hardware facts
    for it: the config checks say which)."""
    inf = env.inference
    name = names.inference_service_name(env.name_prefix, inf.app_name)
    try:
        group = inf.resolved_instance_group(env.hyperpod)
        worker = pods.serve_worker(env)
    except KeyError as err:
        return Unplanned("RayService", name, (f"inference.instance_group: {err.args[0]}",))
    demand = Demand(
        "inference.autoscaling.max_replicas",
        f"deployment {names.INFERENCE_DEPLOYMENT}",
        inf.autoscaling.max_replicas,
        "replicas",
        (bundle(CPU=float(inf.cpus_per_replica), GPU=float(inf.gpus_per_replica)),),
    )
    return ServicePlan(name, group, worker, f"{group.name}-serve", (demand,))


def llm(env: EnvironmentConfig) -> ServicePlan | Unplanned | None:
    """The Serve LLM RayService's plan (None: ``inference.llm.enabled`` is false), or why it has
    none. Its engines ask for the GPU type the worker group declares (a placement group per
    replica), its OpenAI ingress for Serve's default CPU."""
    inf = env.inference
    if not inf.llm.enabled:
        return None
    name = names.llm_service_name(env.name_prefix)
    try:
        inf.resolved_instance_group(env.hyperpod)
    except KeyError as err:  # the services' GPU group: the config checks say why
        return Unplanned("RayService", name, (f"inference.instance_group: {err.args[0]}",))
    try:
        group = inf.resolved_llm_group(env.hyperpod)
        worker = pods.llm_worker(env)
    except KeyError as err:
        return Unplanned("RayService", name, (f"inference.llm.instance_group: {err.args[0]}",))
    c = inf.llm
    demands = (
        Demand(
            "inference.llm.max_replicas",
            f"deployment {LLM_SERVER}:{c.model_id}",
            c.max_replicas,
            "replicas",
            llm_replica_bundles(c.tensor_parallel_size, worker.accelerator_type),
        ),
        Demand(
            "inference.llm",
            f"deployment {LLM_INGRESS}",
            SERVE_DEFAULT_MAX_REPLICAS,
            "replicas",
            ({"CPU": SERVE_DEFAULT_CPUS},),
        ),
    )
    return ServicePlan(name, group, worker, f"{group.name}-llm", demands)


def pretokenize_actors(env: EnvironmentConfig) -> int:
    """The pretokenize job's tokenizer actors: each worker pod's CPUs over each actor's (the
    RayJob passes the count as --workers: what the autoscaling check places is what it asks)."""
    p = env.pretokenize
    assert p is not None
    return p.nodes * (p.cpus // p.cpus_per_worker)


def pretokenize(env: EnvironmentConfig) -> JobPlan | Unplanned | None:
    """The pretokenize RayJob's plan (``pretokenize:``): ``nodes`` CPU-only worker pods on its
    group, its tokenizer actors as the demand; None where the config has no such section."""
    p = env.pretokenize
    if p is None:
        return None
    name = names.PRETOKENIZE_JOB
    groups = env.hyperpod.instance_groups
    g = p.group(groups)
    if g is None:
        where = f"{p.instance_group!r} is not a HyperPod instance group" if p.instance_group else "no instance group"
        return Unplanned(
            "RayJob", name, (f"pretokenize.instance_group: {where}; known: {', '.join(x.name for x in groups)}",)
        )
    if not pods.known(g):
        return Unplanned("RayJob", name, (f"pretokenize: no hardware facts for {g.instance_type} (config/catalog.py)",))
    free = pods.free_per_node(env, g)[0] // 1000
    if p.cpus > free:
        return Unplanned(
            "RayJob",
            name,
            (
                f"pretokenize.cpus: {p.cpus} CPUs per worker pod, but a {g.instance_type} node of group {g.name!r} has "
                f"{free} free; allowed: 1-{free}",
            ),
        )
    if p.cpus_per_worker > p.cpus:
        return Unplanned(
            "RayJob",
            name,
            (
                f"pretokenize.cpus_per_worker: {p.cpus_per_worker} is more than pretokenize.cpus ({p.cpus}); "
                f"allowed: 1-{p.cpus}",
            ),
        )
    demand = Demand(
        "pretokenize.cpus",
        "pretokenize (tokenizer actors)",
        pretokenize_actors(env),
        "actors",
        (bundle(CPU=float(p.cpus_per_worker)),),
    )
    worker = pods.cpu_job_worker(env, g, p.nodes, p.cpus)
    return JobPlan(name, g, worker, f"{g.name}-pretokenize", (demand,), head=pods.training_head(p.nodes))


def whole_node_job(name: str, *, nodes: int = 1, group: str | None = None, demands: tuple[Demand, ...] = ()) -> PlanFn:
    """The plan function of a RayJob ``name`` on ``nodes`` whole nodes of instance group ``group``
    (default: the environment's default GPU group, config.hyperpod.default_gpu_group), each node
    one worker pod as ``hpray submit job`` sizes it, its head sized for those nodes; ``demands``:
    the bundles its code asks Ray for, which the autoscaling check places."""

    def plan(env: EnvironmentConfig) -> JobPlan | Unplanned:
        groups = env.hyperpod.instance_groups
        g = default_gpu_group(groups) if group is None else next((x for x in groups if x.name == group), None)
        if g is None:
            where = "no GPU instance group" if group is None else f"no instance group named {group!r}"
            return Unplanned("RayJob", name, (f"{name}: {where} in hyperpod.instance_groups",))
        if not pods.known(g):
            return Unplanned("RayJob", name, (f"{name}: no hardware facts for {g.instance_type} (config/catalog.py)",))
        worker = pods.job_worker(env, g, nodes)
        return JobPlan(name, g, worker, g.name, demands, head=pods.training_head(nodes))

    return plan


def export(env: EnvironmentConfig) -> JobPlan | Unplanned:
    """The export RayJob's plan: its head alone (``EXPORT_HEAD``, the export its entrypoint),
    so it runs whenever the system nodes have room, beside a training run or after it, and
    takes no GPU node; no worker pods (the RayJob renders no worker group)."""
    plan = whole_node_job(names.export_job_name(env.training.run_name), nodes=1, group=env.training.instance_group)(env)
    if isinstance(plan, JobPlan):
        return replace(plan, worker=replace(plan.worker, min_replicas=0, max_replicas=0), head=EXPORT_HEAD)
    assert isinstance(plan, Unplanned), "whole_node_job plans a JobPlan or says why not"
    return plan


def batch_inference(env: EnvironmentConfig) -> JobPlan | Unplanned | None:
    """The batch inference RayJob's plan (None: no ``batch_inference:`` section): whole nodes of
    its GPU group, as many as its engines' GPUs need; each engine (a ray.data.llm vLLM actor)
    asks for ``tensor_parallel_size`` GPUs, which the autoscaling check places."""
    b = env.batch_inference
    if b is None:
        return None
    name = names.batch_inference_job_name(env.name_prefix)
    groups = env.hyperpod.instance_groups
    g = (
        default_gpu_group(groups)
        if b.instance_group is None
        else next((x for x in groups if x.name == b.instance_group), None)
    )
    if g is None or not g.is_gpu:
        where = (
            "no GPU instance group" if b.instance_group is None else f"{b.instance_group!r} is not a GPU instance group"
        )
        return Unplanned("RayJob", name, (f"batch_inference.instance_group: {where} in hyperpod.instance_groups",))
    try:
        gpus = catalog.instance_spec(g.instance_type).gpus
    except KeyError:
        return Unplanned(
            "RayJob", name, (f"batch_inference: no hardware facts for {g.instance_type} (config/catalog.py)",)
        )
    if b.tensor_parallel_size > gpus:
        return Unplanned(
            "RayJob",
            name,
            (
                f"batch_inference.tensor_parallel_size: {b.tensor_parallel_size} GPUs per engine, but "
                f"{g.instance_type} (instance group {g.name!r}) has {gpus}; allowed: 1-{gpus}",
            ),
        )
    per_node = gpus // b.tensor_parallel_size
    demand = Demand(
        "batch_inference.engines",
        "vLLM engines (ray.data.llm)",
        b.engines,
        "engines",
        tuple(bundle(GPU=1.0) for _ in range(b.tensor_parallel_size)),
    )
    plan = whole_node_job(name, nodes=math.ceil(b.engines / per_node), group=g.name, demands=(demand,))(env)
    assert isinstance(plan, JobPlan | Unplanned), "whole_node_job plans a JobPlan or says why not"
    return plan


_WORKLOAD_PLANS: dict[tuple[int, str, Any], Any] = {}


def workload_plan(env: EnvironmentConfig, key: str, fn: Any) -> Any:
    """``fn(env)``, once per config object, workload key and plan function: every plan over a
    set of planners that holds this workload holds this very object, and a renderer that needs
    only its own workload's plan reads it here (the registry's, without deriving the whole plan)."""
    k = (id(env), key, fn)
    if k not in _WORKLOAD_PLANS:
        _WORKLOAD_PLANS[k] = fn(env)
        weakref.finalize(env, _WORKLOAD_PLANS.pop, k, None)
    return _WORKLOAD_PLANS[k]


def derive(env: EnvironmentConfig, planners: Planners) -> Plan:
    """The plan of ``env`` over ``planners``; call ``plan_of``, which derives it once per config."""
    workloads = {key: w for key, fn in planners if (w := workload_plan(env, key, fn)) is not None}
    jobs = {g.name: pods.job_worker(env, g, 1) for g in env.hyperpod.instance_groups if g.is_gpu and pods.known(g)}
    return Plan(workloads=workloads, job_workers=jobs)


_PLANS: dict[tuple[int, Planners], Plan] = {}


def plan_of(env: EnvironmentConfig, planners: Planners) -> Plan:
    """The plan of ``env`` over ``planners`` (manifests/registry.py passes the registry's; a
    renderer passes its own workload's, and gets the same workload plan object),
    derived on the first call for this config object and these planners (a config is frozen: a
    changed one, e.g. with command-line overrides, is another object and another plan)."""
    key = (id(env), planners)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = derive(env, planners)
        weakref.finalize(env, _PLANS.pop, key, None)
    return plan


def checkpoint_interval_warning(env: EnvironmentConfig, plan: Plan) -> str | None:
    """The synth warning of a production environment whose checkpoint interval is far from the
    Young/Daly optimum (sizing/goodput.py); None otherwise. Other environments checkpoint often
    on purpose, to exercise saves and restores within short runs: the sizing table shows their
    figures without a warning."""
    c = plan.checkpoint
    if not env.production or c is None or c.goodput is None:
        return None
    return goodput.warning(c.goodput)
