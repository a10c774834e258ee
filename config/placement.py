"""Placement: every pod the platform runs fits the node pool it selects.

Node pools come from the config: the EKS `system` node group and each HyperPod instance group,
with what one node offers to pods (``catalog.node_allocatable``: vCPUs at the group's
threads-per-core, the EKS AMI's kube-reserved, eviction threshold and max pods), its labels and
its taints. Pods are generic (config/scheduling.py: requests, nodeSelector, required node
affinity, tolerations, DaemonSet or not); ``pod_from_spec`` reads one from a Kubernetes PodSpec,
so pods rendered from Helm charts can be placed like the ones built here.

The workload pods are sized here, from the pools (``training_worker``, ``serve_worker``,
``llm_worker``, ``RAY_HEAD``), and the KubeRay manifests take their sizes from these functions:
what is checked is what is rendered.

``check_against(env)`` places every pod in three situations and returns one line per misfit:
- as configured: training and both services at their maximum replicas, at once;
- a RayService upgrade: a second Ray cluster per service beside the running one (NewCluster);
- HyperPod replacing a node: one node of a group gone. The services keep their minimum replicas
  there; training pods beyond the remaining nodes wait for the replacement (Ray Train restarts
  the worker group when it is back), the others keep their nodes.
Pods are placed first-fit, largest first, one node at a time (DaemonSets on every node they
select), as the scheduler must be able to: a pod that fits no node is a misfit.

One module because the pod sizes the manifests render and the check that places them share the
node pools; split, the sizes checked could drift from the sizes rendered.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from config import addons, catalog, names
from config.eks import Eks
from config.hyperpod import HyperPod, InstanceGroup
from config.inference import Inference
from config.scheduling import (
    Placement,
    Pod,
    Pool,
    cpu_millis,
    format_cpu,
    format_memory,
    memory_mib,
    place,
    pod_from_spec,
    selects,
)
from config.storage import Fsx
from config.training import Training

# A Ray head runs the GCS, the dashboard and the job's driver or Serve's controller, no Ray
# work (num-cpus 0). One CPU and 4 GiB hold that for clusters of a few dozen workers; several
# heads share each `system` node (training, each service, twice during an upgrade).
RAY_HEAD = {"cpu": "1", "memory": "4Gi"}
# A serving replica without GPUs still holds the model, the batch and the HTTP buffers.
MIN_SERVE_MEMORY_GIB = 4


class _Environment(Protocol):
    """What placement reads of the environment (config.environment.EnvironmentConfig)."""

    @property
    def name(self) -> str: ...
    @property
    def name_prefix(self) -> str: ...
    @property
    def eks(self) -> Eks: ...
    @property
    def hyperpod(self) -> HyperPod: ...
    @property
    def fsx(self) -> Fsx: ...
    @property
    def training(self) -> Training: ...
    @property
    def inference(self) -> Inference: ...
    def gpu_device_plugin_instance_types(self) -> list[str]: ...
    def efa_device_plugin_instance_types(self) -> list[str]: ...


def _arch(instance_type: str) -> str:
    return "arm64" if instance_type.startswith(("ml.p6e-gb200.",)) else "amd64"


def system_pool(eks: Eks) -> Pool:
    nodes = eks.system_nodes
    # The trunk interface of security groups for pods (the Ray heads' own group,
    # constructs/ray_heads.py) takes one of the node's ENIs from the ordinary pods.
    alloc = dataclasses.replace(
        catalog.node_allocatable(nodes.instance_type), pods=catalog.max_pods_with_trunk(nodes.instance_type)
    )
    return Pool(
        name=names.SYSTEM_NODEGROUP,
        instance_type=nodes.instance_type,
        nodes=nodes.desired_size,
        allocatable=alloc,
        gpus=0,
        efa=0,
        labels={
            names.NODEGROUP_LABEL: names.SYSTEM_NODEGROUP,
            names.INSTANCE_TYPE_LABEL: nodes.instance_type,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": _arch(nodes.instance_type),
        },
    )


def hyperpod_pool(group: InstanceGroup) -> Pool:
    spec = catalog.instance_spec(group.instance_type)
    return Pool(
        name=group.name,
        instance_type=group.instance_type,
        nodes=group.instance_count,
        allocatable=catalog.node_allocatable(group.instance_type, threads_per_core=group.threads_per_core),
        gpus=spec.gpus,
        efa=spec.efa_interfaces,
        labels={
            **group.labels,
            names.INSTANCE_TYPE_LABEL: group.instance_type,
            names.HYPERPOD_HEALTH_LABEL: names.HYPERPOD_HEALTHY,
            names.HYPERPOD_INSTANCE_GROUP_LABEL: group.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": _arch(group.instance_type),
        },
        taints=tuple((t.key, t.value, t.effect) for t in group.taints),
    )


def _known(group: InstanceGroup) -> bool:
    try:
        hyperpod_pool(group)
    except KeyError:
        return False
    return True


def pool_problems(env: _Environment) -> list[str]:
    """The `system` pool must be known (the Ray heads run there). A HyperPod group the catalog has
    no facts for (a CPU type, say) runs only DaemonSets: it is left out of the check."""
    try:
        system_pool(env.eks)
    except KeyError as err:
        return [
            f"eks.system_nodes.instance_type: {err.args[0]}; add its vCPUs, memory and ENI "
            "limits to config/catalog.py and config/eni_limits.json (the placement check needs them)"
        ]
    used = set()
    training_group = env.training._group(env.hyperpod.instance_groups)
    if training_group is not None:
        used.add(training_group.name)
    try:
        used.add(env.inference.resolved_instance_group(env).name)
        if env.inference.llm.enabled:
            used.add(env.inference.resolved_llm_group(env).name)
    except KeyError:
        pass
    return [
        f"hyperpod.instance_groups[{i}].instance_type: {g.instance_type!r} runs Ray workers but has "
        "no ENI limits in config/eni_limits.json (the placement check needs them)"
        for i, g in enumerate(env.hyperpod.instance_groups)
        if g.name in used and not _known(g)
    ]


def pools(env: _Environment) -> list[Pool]:
    """The `system` pool and every HyperPod group with hardware facts in the catalog."""
    return [system_pool(env.eks)] + [hyperpod_pool(g) for g in env.hyperpod.instance_groups if _known(g)]


# ---------------------------------------------------------------------------------------------
# The platform's pods, sized from the pools
# ---------------------------------------------------------------------------------------------


def daemonsets(env: _Environment) -> list[Pod]:
    """Every DaemonSet the platform installs: EKS add-ons (the Secrets Store CSI driver's with
    token auth), device plugins, health agent."""
    out = [
        pod_from_spec(
            name, {"containers": [{"resources": res}], "tolerations": addons.every_node_tolerations()}, daemonset=True
        )
        for name, res in addons.EKS_ADDON_DAEMONSETS.items()
    ]
    if env.eks.ray_token_auth:
        # Every Ray pod mounts the token's CSI volume: the driver and its provider on every node.
        tolerations = addons.secrets_store_configuration()["tolerations"]
        out += [
            pod_from_spec(
                name, {"containers": [{"resources": r} for r in res], "tolerations": tolerations}, daemonset=True
            )
            for name, res in addons.SECRETS_STORE_DAEMONSETS.items()
        ]
    gpu_types = env.gpu_device_plugin_instance_types()
    efa_types = env.efa_device_plugin_instance_types()
    if gpu_types:
        out.append(
            pod_from_spec(
                "nvidia-device-plugin",
                {
                    "containers": [{"resources": addons.DEVICE_PLUGIN_RESOURCES}],
                    "affinity": addons.instance_type_affinity(gpu_types),
                    "tolerations": addons.hyperpod_node_tolerations(),
                },
                daemonset=True,
            )
        )
        out.append(
            pod_from_spec(
                "health-monitoring-agent",
                {
                    "containers": [{"resources": addons.HEALTH_MONITORING_AGENT_RESOURCES}],
                    "affinity": addons.instance_type_affinity(gpu_types),
                    "tolerations": addons.HEALTH_MONITORING_AGENT_TOLERATIONS,
                },
                daemonset=True,
            )
        )
    if efa_types:
        out.append(
            pod_from_spec(
                "aws-efa-k8s-device-plugin",
                {
                    "containers": [{"resources": addons.DEVICE_PLUGIN_RESOURCES}],
                    "affinity": addons.instance_type_affinity(efa_types),
                    "tolerations": addons.hyperpod_node_tolerations(),
                },
                daemonset=True,
            )
        )
    return out


def free_per_node(env: _Environment, group: InstanceGroup) -> tuple[int, int]:
    """(CPU millicores, memory MiB) one node of ``group`` offers once its DaemonSets run."""
    pool = hyperpod_pool(group)
    ds = [p for p in daemonsets(env) if selects(p, pool)]
    return (
        pool.allocatable.cpu_millis - sum(p.cpu_millis for p in ds),
        pool.allocatable.memory_mib - sum(p.memory_mib for p in ds),
    )


@dataclass(frozen=True)
class WorkerShape:
    """One Ray worker pod of a worker group: what it requests, and how many there are."""

    group: str
    instance_type: str
    min_replicas: int
    max_replicas: int
    gpus: int
    efa: int
    cpus: int  # whole CPUs: Ray's num-cpus comes from the container's CPU
    memory_gib: int
    # Ray Train workers per pod (training) or Serve replicas per pod (serving).
    per_pod: int = 1

    @property
    def resources(self) -> dict[str, str]:
        res = {"cpu": str(self.cpus), "memory": f"{self.memory_gib}Gi"}
        if self.gpus:
            res[names.GPU_RESOURCE] = str(self.gpus)
        if self.efa:
            res[names.EFA_RESOURCE] = str(self.efa)
        return res


def _share(env: _Environment, group: InstanceGroup, gpus: int) -> tuple[int, int, int]:
    """Whole CPUs, GiB and EFA interfaces of a node's free resources in proportion to ``gpus``
    of its GPUs (all of it for a pod without GPUs on a node without them)."""
    spec = catalog.instance_spec(group.instance_type)
    cpu, mem = free_per_node(env, group)
    fraction = gpus / spec.gpus if spec.gpus else 1.0
    return (
        int(cpu * fraction) // 1000,
        int(mem * fraction) // 1024,
        spec.efa_interfaces * gpus // spec.gpus if spec.gpus else 0,
    )


def training_worker(env: _Environment) -> WorkerShape:
    """The RayJob's worker pod: one per node, holding that node's Ray Train workers, their GPUs
    and the node's free CPU and memory in proportion (all of it when they take every GPU)."""
    t = env.training
    p = t.placement(env.hyperpod.instance_groups)
    group = env.hyperpod.group(p.group)
    per_pod = min(p.workers, p.workers_per_node)
    gpus = per_pod * t.gpus_per_worker
    cpus, mem, efa = _share(env, group, gpus)
    return WorkerShape(
        group=group.name,
        instance_type=group.instance_type,
        min_replicas=p.nodes,
        max_replicas=p.nodes,
        gpus=gpus,
        efa=efa,
        cpus=cpus,
        memory_gib=mem,
        per_pod=per_pod,
    )


def job_worker(env: _Environment, group: InstanceGroup, nodes: int) -> WorkerShape:
    """The worker pod of an ``hpray submit job`` RayJob: one per node on ``nodes`` whole nodes of
    ``group``, each with all the node's GPUs and EFA interfaces and what it has left once its
    DaemonSets run."""
    spec = catalog.instance_spec(group.instance_type)
    cpus, mem, efa = _share(env, group, spec.gpus)
    return WorkerShape(
        group=group.name,
        instance_type=group.instance_type,
        min_replicas=nodes,
        max_replicas=nodes,
        gpus=spec.gpus,
        efa=efa,
        cpus=max(1, cpus),
        memory_gib=max(1, mem),
    )


def team_problems(env: _Environment) -> list[str]:
    """Each team's quota (config teams) holds at least one ``hpray submit job`` job: a Ray head
    (system nodes) and one whole node's worker pod of a GPU instance group (the job commands ask
    whole nodes), else every job of the team is refused by its ResourceQuota."""
    gpu_groups = [g for g in env.hyperpod.instance_groups if g.is_gpu and _known(g)]
    head_cpu, head_mem = cpu_millis(RAY_HEAD["cpu"]), memory_mib(RAY_HEAD["memory"])
    out = []
    for i, team in enumerate(getattr(env, "teams", None) or []):
        q = team.quota
        if q.gpus == 0 or not gpu_groups:
            continue
        fitting = []
        for g in gpu_groups:
            w = job_worker(env, g, 1)
            if (
                w.gpus <= q.gpus
                and w.cpus * 1000 + head_cpu <= q.cpus * 1000
                and (w.memory_gib * 1024 + head_mem <= q.memory_gib * 1024)
            ):
                fitting.append(g.name)
        if not fitting:
            smallest = min((job_worker(env, g, 1) for g in gpu_groups), key=lambda w: (w.gpus, w.cpus, w.memory_gib))
            out.append(
                f"teams[{i}].quota: gpus {q.gpus}, cpus {q.cpus}, memory_gib {q.memory_gib} hold no job of team "
                f"{team.name!r}: one job is a Ray head ({RAY_HEAD['cpu']} CPU, {RAY_HEAD['memory']}) and at least one "
                f"whole node's worker pod (smallest: {smallest.instance_type} in {smallest.group!r}, {smallest.gpus} GPUs, "
                f"{smallest.cpus} CPUs, {smallest.memory_gib} GiB); allowed: gpus 0 (no GPU jobs), or at least "
                f"gpus {smallest.gpus}, cpus {smallest.cpus + 1}, memory_gib {smallest.memory_gib + 4}"
            )
    return out


def team_rows(env: _Environment) -> list[str]:
    """Where each team's job pods run: heads on the system pool, workers on whole GPU nodes, up
    to the team's quota."""
    rows = []
    for team in getattr(env, "teams", None) or []:
        q = team.quota
        groups = [
            f"{g.name} ({g.instance_type}, {catalog.instance_spec(g.instance_type).gpus} GPUs/node: "
            f"at most {q.gpus // catalog.instance_spec(g.instance_type).gpus} nodes)"
            for g in env.hyperpod.instance_groups
            if g.is_gpu and _known(g)
        ]
        rows.append(
            f"  [team {team.name}] namespace {team.resolved_namespace}: Ray heads on {names.SYSTEM_NODEGROUP} "
            f"({RAY_HEAD['cpu']} CPU, {RAY_HEAD['memory']} each, at most {q.rayjobs} RayJobs); workers on whole nodes of "
            + (", ".join(groups) or "no GPU instance group")
            + f"; quota {q.gpus} GPUs, {q.cpus} CPUs, {q.memory_gib} GiB"
        )
    return rows


def serve_worker(env: _Environment) -> WorkerShape:
    """The generation RayService's worker pod: the GPUs of its replicas, their CPUs plus one for
    Ray, and the node's free memory in proportion to those GPUs."""
    inf = env.inference
    group = inf.resolved_instance_group(env)
    per_pod, gpus, pod_cpus = inf.pod_shape()
    lo, hi = inf.worker_pods()
    mem = _share(env, group, gpus)[1] if gpus else MIN_SERVE_MEMORY_GIB
    return WorkerShape(
        group=group.name,
        instance_type=group.instance_type,
        min_replicas=lo,
        max_replicas=hi,
        # Inference replicas run no collectives: no EFA interfaces.
        gpus=gpus,
        efa=0,
        cpus=max(1, math.ceil(pod_cpus)),
        memory_gib=max(MIN_SERVE_MEMORY_GIB, mem),
        per_pod=per_pod,
    )


def llm_worker(env: _Environment) -> WorkerShape:
    """The Serve LLM RayService's worker pod: one engine's GPUs (tensor_parallel_size) with the
    node's free CPU and memory in proportion."""
    llm = env.inference.llm
    group = env.inference.resolved_llm_group(env)
    cpus, mem, _ = _share(env, group, llm.tensor_parallel_size)
    return WorkerShape(
        group=group.name,
        instance_type=group.instance_type,
        min_replicas=max(llm.min_replicas, 1),
        max_replicas=llm.max_replicas,
        gpus=llm.tensor_parallel_size,
        efa=0,
        cpus=max(1, cpus),
        memory_gib=max(1, mem),
    )


def worker_pod(name: str, shape: WorkerShape, group: InstanceGroup, replicas: int) -> Pod:
    """The pod of ``shape`` as the manifests write it (workloads/common/k8s.py worker_group)."""
    tolerations = [{"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect} for t in group.taints]
    if shape.gpus:
        tolerations.append({"key": names.GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"})
    return pod_from_spec(
        name,
        {
            "nodeSelector": {
                names.INSTANCE_TYPE_LABEL: shape.instance_type,
                names.HYPERPOD_HEALTH_LABEL: names.HYPERPOD_HEALTHY,
            },
            "tolerations": tolerations,
            "containers": [{"resources": {"requests": shape.resources, "limits": shape.resources}}],
        },
        replicas=replicas,
    )


def head_pod(name: str, *, autoscaler: bool) -> Pod:
    containers: list[dict[str, Any]] = [{"resources": {"requests": RAY_HEAD, "limits": RAY_HEAD}}]
    if autoscaler:
        containers.append({"resources": addons.RAY_AUTOSCALER_SIDECAR_RESOURCES})
    return pod_from_spec(name, {"nodeSelector": dict(names.SYSTEM_NODE_SELECTOR), "containers": containers})


def _llm_enabled(env: _Environment) -> bool:
    return env.inference.llm.enabled


def _services(env: _Environment) -> list[tuple[str, WorkerShape, InstanceGroup]]:
    out: list[tuple[str, WorkerShape, InstanceGroup]] = []
    try:
        group = env.inference.resolved_instance_group(env)
    except KeyError:  # no GPU group: no RayService to place (rendering it says why)
        return out
    out.append((f"RayService {env.name_prefix}-{env.inference.app_name}", serve_worker(env), group))
    if _llm_enabled(env):
        out.append((f"RayService {env.name_prefix}-llm", llm_worker(env), env.inference.resolved_llm_group(env)))
    return out


def _training(env: _Environment) -> tuple[str, WorkerShape, InstanceGroup] | None:
    if env.training._group(env.hyperpod.instance_groups) is None:
        return None
    shape = training_worker(env)
    return f"RayJob train-{env.training.run_name}", shape, env.hyperpod.group(shape.group)


def platform_pods(env: _Environment, situation: str = "configured", *, lost_group: str | None = None) -> list[Pod]:
    """Every pod of the platform in ``situation``: "configured", "upgrade" (a second cluster per
    RayService) or "node-loss" (``lost_group`` has one node fewer)."""
    pods = daemonsets(env)
    pods.append(
        pod_from_spec(
            "coredns",
            {"nodeSelector": dict(names.SYSTEM_NODE_SELECTOR), "containers": [{"resources": addons.COREDNS_RESOURCES}]},
            replicas=addons.COREDNS_REPLICAS,
        )
    )
    pods.append(
        pod_from_spec(
            "kuberay-operator",
            {"nodeSelector": dict(names.SYSTEM_NODE_SELECTOR), "containers": [{"resources": addons.KUBERAY_RESOURCES}]},
        )
    )
    training = _training(env)
    if training is not None:
        name, shape, group = training
        # HTTPMode (workloads/training/manifest.py): the operator submits to the head's
        # dashboard, so the RayJob has no submitter pod.
        pods.append(head_pod(f"{name} head", autoscaler=False))
        replicas = shape.max_replicas
        if situation == "node-loss" and lost_group == group.name:
            replicas = min(replicas, group.instance_count - 1)
        if replicas > 0:
            pods.append(worker_pod(f"{name} worker", shape, group, replicas))
    strategy = env.inference.upgrade_strategy
    for name, shape, group in _services(env):
        copies = [("", shape.max_replicas)]
        if situation == "node-loss":
            copies = [("", shape.min_replicas)]
        elif situation == "upgrade" and strategy == "NewCluster":
            copies.append((" (upgrade: new cluster)", shape.max_replicas))
        elif situation == "upgrade" and strategy == "NewClusterWithIncrementalUpgrade":
            copies.append((" (upgrade: new cluster)", shape.min_replicas))
        for suffix, replicas in copies:
            pods.append(head_pod(f"{name}{suffix} head", autoscaler=True))
            if replicas > 0:
                pods.append(worker_pod(f"{name}{suffix} worker", shape, group, replicas))
    return pods


def _with(pods: list[Pod], extra: Sequence[Pod]) -> list[Pod]:
    """``pods`` with ``extra`` instead of the pods of the same names (rendered chart pods in place
    of the ones built from the values this app sets)."""
    replaced = {p.name for p in extra}
    return [p for p in pods if p.name not in replaced] + list(extra)


class _ChartPod(Protocol):
    """A pod template a Helm release renders (constructs.chart_pods.ChartPod)."""

    @property
    def name(self) -> str: ...
    @property
    def pod_spec(self) -> Any: ...
    @property
    def replicas(self) -> int | None: ...
    @property
    def is_daemonset(self) -> bool: ...


def pods_from_charts(chart_pods: Sequence[_ChartPod]) -> list[Pod]:
    """The pods of rendered Helm releases (``constructs.chart_pods.chart_pods(env)``), for
    ``check_against(env, extra_pods=...)``: a DaemonSet one per node it selects, a Deployment its
    replicas."""
    return [
        pod_from_spec(p.name, p.pod_spec, replicas=1 if p.replicas is None else p.replicas, daemonset=p.is_daemonset)
        for p in chart_pods
    ]


def situations(env: _Environment, extra_pods: Sequence[Pod] = ()) -> list[Placement]:
    """The placements ``check_against`` checks: as configured, a RayService upgrade, and one
    node lost in each HyperPod group with nodes. ``extra_pods`` are placed in every situation."""
    all_pools = pools(env)
    out = [place(all_pools, _with(platform_pods(env), extra_pods), situation="as configured")]
    if env.inference.upgrade_strategy != "None" and _services(env):
        out.append(place(all_pools, _with(platform_pods(env, "upgrade"), extra_pods), situation="RayService upgrade"))
    for g in env.hyperpod.instance_groups:
        if g.instance_count < 1 or not _known(g):
            continue
        fewer = [replace(p, nodes=p.nodes - 1) if p.name == g.name else p for p in all_pools]
        out.append(
            place(
                fewer,
                _with(platform_pods(env, "node-loss", lost_group=g.name), extra_pods),
                situation=f"HyperPod replacing a node of {g.name}",
            )
        )
    return out


def check_against(env: _Environment, extra_pods: Sequence[Pod] = ()) -> list[str]:
    """Every misfit in every situation, one line each (empty when everything fits).

    ``extra_pods``: pods rendered elsewhere, for example from the real Helm charts with
    ``pod_from_spec(name, rendered["spec"]["template"]["spec"], daemonset=kind == "DaemonSet",
    replicas=...)``; a pod named like one of ``platform_pods`` ("kuberay-operator",
    "nvidia-device-plugin", "aws-efa-k8s-device-plugin", ...) takes its place."""
    problems = pool_problems(env)
    if problems:
        return problems
    seen: list[str] = []
    for p in situations(env, extra_pods):
        seen.extend(m for m in p.misfits if m not in seen)
    return seen + team_problems(env)


def table(env: _Environment) -> list[list[str]]:
    """Rows (situation, pool, nodes, pods, CPU, memory, GPUs) of what each pool holds."""
    rows = []
    for p in situations(env):
        for pool in p.pools:
            used = p.used(pool)
            a = pool.allocatable
            pods = ", ".join(f"{n} x{c}" if c > 1 else n for n, c in sorted(p.pods_on(pool).items()))
            rows.append(
                [
                    p.situation,
                    pool.name,
                    f"{pool.nodes} x {pool.instance_type}",
                    pods,
                    f"{format_cpu(used['cpu'])} / {format_cpu(a.cpu_millis * pool.nodes)}",
                    f"{format_memory(used['memory'])} / {format_memory(a.memory_mib * pool.nodes)}",
                    f"{used['gpus']} / {pool.gpus * pool.nodes}",
                ]
            )
    return rows


TABLE_HEADERS = [
    "Situation",
    "Pool",
    "Nodes",
    "Pods",
    "CPU used / allocatable",
    "Memory used / allocatable",
    "GPUs used / allocatable",
]


def render_table(env: _Environment) -> str:
    """The placement as text (``python -m config ENV``, run by `make synth`)."""
    lines = [f"Placement of {env.name}: every pod on the node pool it selects (used / allocatable)"]
    for situation, pool, nodes, pods, cpu, mem, gpus in table(env):
        lines.append(f"  [{situation}] {pool} ({nodes}): cpu {cpu}, memory {mem}, gpus {gpus}")
        lines.append(f"      {pods or '(no pods)'}")
    return "\n".join(lines + team_rows(env))
