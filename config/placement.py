"""Placement: every pod the platform runs fits the node pool it selects.

Node pools come from the config: the EKS `system` node group and each HyperPod instance group,
with what one node offers to pods (``catalog.node_allocatable``: vCPUs at the group's
threads-per-core, the EKS AMI's kube-reserved, eviction threshold and max pods), its labels and
its taints. Pods are generic (``Pod``: requests, nodeSelector, required node affinity,
tolerations, DaemonSet or not); ``pod_from_spec`` reads one from a Kubernetes PodSpec, so pods
rendered from Helm charts can be placed like the ones built here.

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
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from config import addons, catalog, names
from config.eks import Eks
from config.hyperpod import HyperPod, InstanceGroup
from config.inference import Inference
from config.storage import Fsx
from config.training import Training

# A Ray head runs the GCS, the dashboard and the job's driver or Serve's controller, no Ray
# work (num-cpus 0). One CPU and 4 GiB hold that for clusters of a few dozen workers; several
# heads share each `system` node (training, each service, twice during an upgrade).
RAY_HEAD = {"cpu": "1", "memory": "4Gi"}
# The RayJob submitter (K8sJobMode): `ray job submit` and log tailing.
RAY_JOB_SUBMITTER = {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
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


# ---------------------------------------------------------------------------------------------
# Quantities
# ---------------------------------------------------------------------------------------------

_MEMORY_UNITS = {"": 1, "k": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4, "Ki": 1024, "Mi": 1024**2,
                 "Gi": 1024**3, "Ti": 1024**4}


def cpu_millis(quantity: str | int | float) -> int:
    """A Kubernetes CPU quantity ("500m", "2", 1.5) in millicores."""
    text = str(quantity)
    if text.endswith("m"):
        return int(text[:-1])
    return math.ceil(float(text) * 1000)


def memory_mib(quantity: str | int) -> int:
    """A Kubernetes memory quantity ("512Mi", "16Gi", "1G", bytes) in MiB, rounded up."""
    m = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(quantity))
    if not m or m.group(2) not in _MEMORY_UNITS:
        raise ValueError(f"{quantity!r} is not a Kubernetes memory quantity")
    return math.ceil(float(m.group(1)) * _MEMORY_UNITS[m.group(2)] / 1024**2)


def _cpu(millis: int) -> str:
    return f"{millis / 1000:g}"


def _mem(mib: int) -> str:
    return f"{mib / 1024:.1f}Gi"


# ---------------------------------------------------------------------------------------------
# Pools and pods
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pool:
    """Identical nodes: the `system` node group or one HyperPod instance group."""

    name: str
    instance_type: str
    nodes: int
    allocatable: catalog.Allocatable
    gpus: int
    efa: int
    labels: Mapping[str, str]
    taints: tuple[tuple[str, str, str], ...] = ()


@dataclass(frozen=True)
class Pod:
    """What the scheduler looks at. ``affinity`` holds the required node-affinity terms (any
    term, all its expressions); ``tolerations`` (key, operator, value, effect) with None for an
    empty field; ``replicas`` identical pods, or one per selected node when ``daemonset``."""

    name: str
    cpu_millis: int
    memory_mib: int
    gpus: int = 0
    efa: int = 0
    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity: tuple[tuple[tuple[str, str, tuple[str, ...]], ...], ...] = ()
    tolerations: tuple[tuple[str | None, str, str | None, str | None], ...] = ()
    daemonset: bool = False
    replicas: int = 1


def _requests(resources: Mapping[str, Any]) -> dict[str, str]:
    # Kubernetes defaults a missing request to the limit.
    return {**resources.get("limits", {}), **resources.get("requests", {})}


def pod_from_spec(name: str, spec: Mapping[str, Any], *, replicas: int = 1, daemonset: bool = False) -> Pod:
    """A ``Pod`` from a Kubernetes PodSpec (a Deployment's or DaemonSet's ``spec.template.spec``):
    the containers' requests summed (an init container's when larger), nodeSelector, required
    node affinity and tolerations."""
    totals = {"cpu": 0, "memory": 0, names.GPU_RESOURCE: 0, names.EFA_RESOURCE: 0}

    def add(into: dict[str, int], container: Mapping[str, Any]) -> None:
        req = _requests(container.get("resources") or {})
        into["cpu"] += cpu_millis(req["cpu"]) if "cpu" in req else 0
        into["memory"] += memory_mib(req["memory"]) if "memory" in req else 0
        for ext in (names.GPU_RESOURCE, names.EFA_RESOURCE):
            into[ext] += int(req.get(ext, 0))

    for c in spec.get("containers", []):
        add(totals, c)
    for c in spec.get("initContainers", []):
        one = dict.fromkeys(totals, 0)
        add(one, c)
        totals = {k: max(v, one[k]) for k, v in totals.items()}
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = tuple(
        tuple((e["key"], e["operator"], tuple(e.get("values", ()))) for e in term.get("matchExpressions", []))
        for term in required.get("nodeSelectorTerms", [])
    )
    tolerations = tuple(
        (t.get("key"), t.get("operator", "Equal"), t.get("value"), t.get("effect")) for t in spec.get("tolerations") or []
    )
    return Pod(name=name, cpu_millis=totals["cpu"], memory_mib=totals["memory"], gpus=totals[names.GPU_RESOURCE],
               efa=totals[names.EFA_RESOURCE], node_selector=dict(spec.get("nodeSelector") or {}),
               affinity=terms, tolerations=tolerations, daemonset=daemonset, replicas=replicas)


def _expression_matches(labels: Mapping[str, str], key: str, op: str, values: tuple[str, ...]) -> bool:
    if op == "In":
        return labels.get(key) in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise ValueError(f"node affinity operator {op!r} is not supported by the placement check")


def _tolerates(pod: Pod, taint: tuple[str, str, str]) -> bool:
    key, value, effect = taint
    for t_key, op, t_value, t_effect in pod.tolerations:
        if t_effect not in (None, "", effect):
            continue
        if t_key in (None, "") and op == "Exists":
            return True
        if t_key == key and (op == "Exists" or (t_value or "") == value):
            return True
    return False


def selects(pod: Pod, pool: Pool) -> bool:
    """Whether the scheduler may put ``pod`` on a node of ``pool`` (labels and taints only)."""
    if any(pool.labels.get(k) != v for k, v in pod.node_selector.items()):
        return False
    if pod.affinity and not any(all(_expression_matches(pool.labels, *e) for e in term) for term in pod.affinity):
        return False
    return all(_tolerates(pod, t) for t in pool.taints if t[2] in ("NoSchedule", "NoExecute"))


def _arch(instance_type: str) -> str:
    return "arm64" if instance_type.startswith(("ml.p6e-gb200.",)) else "amd64"


def system_pool(eks: Eks) -> Pool:
    nodes = eks.system_nodes
    alloc = catalog.node_allocatable(nodes.instance_type)
    return Pool(
        name=names.SYSTEM_NODEGROUP, instance_type=nodes.instance_type, nodes=nodes.desired_size,
        allocatable=alloc, gpus=0, efa=0,
        labels={names.NODEGROUP_LABEL: names.SYSTEM_NODEGROUP, names.INSTANCE_TYPE_LABEL: nodes.instance_type,
                "kubernetes.io/os": "linux", "kubernetes.io/arch": _arch(nodes.instance_type)},
    )


def hyperpod_pool(group: InstanceGroup) -> Pool:
    spec = catalog.instance_spec(group.instance_type)
    return Pool(
        name=group.name, instance_type=group.instance_type, nodes=group.instance_count,
        allocatable=catalog.node_allocatable(group.instance_type, threads_per_core=group.threads_per_core),
        gpus=spec.gpus, efa=spec.efa_interfaces,
        labels={**group.labels, names.INSTANCE_TYPE_LABEL: group.instance_type,
                names.HYPERPOD_HEALTH_LABEL: names.HYPERPOD_HEALTHY,
                names.HYPERPOD_INSTANCE_GROUP_LABEL: group.name,
                "kubernetes.io/os": "linux", "kubernetes.io/arch": _arch(group.instance_type)},
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
        return [f"eks.system_nodes.instance_type: {err.args[0]}; add its vCPUs, memory and ENI "
                "limits to config/catalog.py and config/eni_limits.json (the placement check needs them)"]
    used = set()
    if env.training._group(env.hyperpod.instance_groups) is not None:
        used.add(env.training._group(env.hyperpod.instance_groups).name)
    try:
        used.add(env.inference.resolved_instance_group(env).name)
        if env.inference.llm.enabled:
            used.add(env.inference.resolved_llm_group(env).name)
    except KeyError:
        pass
    return [f"hyperpod.instance_groups[{i}].instance_type: {g.instance_type!r} runs Ray workers but has "
            "no ENI limits in config/eni_limits.json (the placement check needs them)"
            for i, g in enumerate(env.hyperpod.instance_groups) if g.name in used and not _known(g)]


def pools(env: _Environment) -> list[Pool]:
    """The `system` pool and every HyperPod group with hardware facts in the catalog."""
    return [system_pool(env.eks)] + [hyperpod_pool(g) for g in env.hyperpod.instance_groups if _known(g)]


# ---------------------------------------------------------------------------------------------
# The platform's pods, sized from the pools
# ---------------------------------------------------------------------------------------------


def daemonsets(env: _Environment) -> list[Pod]:
    """Every DaemonSet the platform installs: EKS add-ons, device plugins, health agent."""
    out = [pod_from_spec(name, {"containers": [{"resources": res}], "tolerations": addons.every_node_tolerations()},
                         daemonset=True)
           for name, res in addons.EKS_ADDON_DAEMONSETS.items()]
    gpu_types = env.gpu_device_plugin_instance_types()
    efa_types = env.efa_device_plugin_instance_types()
    if gpu_types:
        out.append(pod_from_spec("nvidia-device-plugin", {
            "containers": [{"resources": addons.DEVICE_PLUGIN_RESOURCES}],
            "affinity": addons.instance_type_affinity(gpu_types),
            "tolerations": addons.hyperpod_node_tolerations()}, daemonset=True))
        out.append(pod_from_spec("health-monitoring-agent", {
            "containers": [{"resources": addons.HEALTH_MONITORING_AGENT_RESOURCES}],
            "affinity": addons.instance_type_affinity(gpu_types),
            "tolerations": addons.HEALTH_MONITORING_AGENT_TOLERATIONS}, daemonset=True))
    if efa_types:
        out.append(pod_from_spec("aws-efa-k8s-device-plugin", {
            "containers": [{"resources": addons.DEVICE_PLUGIN_RESOURCES}],
            "affinity": addons.instance_type_affinity(efa_types),
            "tolerations": addons.hyperpod_node_tolerations()}, daemonset=True))
    return out


def free_per_node(env: _Environment, group: InstanceGroup) -> tuple[int, int]:
    """(CPU millicores, memory MiB) one node of ``group`` offers once its DaemonSets run."""
    pool = hyperpod_pool(group)
    ds = [p for p in daemonsets(env) if selects(p, pool)]
    return (pool.allocatable.cpu_millis - sum(p.cpu_millis for p in ds),
            pool.allocatable.memory_mib - sum(p.memory_mib for p in ds))


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
    return (int(cpu * fraction) // 1000, int(mem * fraction) // 1024,
            spec.efa_interfaces * gpus // spec.gpus if spec.gpus else 0)


def training_worker(env: _Environment) -> WorkerShape:
    """The RayJob's worker pod: one per node, holding that node's Ray Train workers, their GPUs
    and the node's free CPU and memory in proportion (all of it when they take every GPU)."""
    t = env.training
    p = t.placement(env.hyperpod.instance_groups)
    group = env.hyperpod.group(p.group)
    per_pod = min(p.workers, p.workers_per_node)
    gpus = per_pod * t.gpus_per_worker
    cpus, mem, efa = _share(env, group, gpus)
    return WorkerShape(group=group.name, instance_type=group.instance_type, min_replicas=p.nodes,
                       max_replicas=p.nodes, gpus=gpus, efa=efa, cpus=cpus, memory_gib=mem, per_pod=per_pod)


def serve_worker(env: _Environment) -> WorkerShape:
    """The generation RayService's worker pod: the GPUs of its replicas, their CPUs plus one for
    Ray, and the node's free memory in proportion to those GPUs."""
    inf = env.inference
    group = inf.resolved_instance_group(env)
    per_pod, gpus, pod_cpus = inf.pod_shape()
    lo, hi = inf.worker_pods()
    mem = _share(env, group, gpus)[1] if gpus else MIN_SERVE_MEMORY_GIB
    return WorkerShape(group=group.name, instance_type=group.instance_type, min_replicas=lo, max_replicas=hi,
                       # Inference replicas run no collectives: no EFA interfaces.
                       gpus=gpus, efa=0, cpus=max(1, math.ceil(pod_cpus)),
                       memory_gib=max(MIN_SERVE_MEMORY_GIB, mem), per_pod=per_pod)


def llm_worker(env: _Environment) -> WorkerShape:
    """The Serve LLM RayService's worker pod: one engine's GPUs (tensor_parallel_size) with the
    node's free CPU and memory in proportion."""
    llm = env.inference.llm
    group = env.inference.resolved_llm_group(env)
    cpus, mem, _ = _share(env, group, llm.tensor_parallel_size)
    return WorkerShape(group=group.name, instance_type=group.instance_type,
                       min_replicas=max(llm.min_replicas, 1), max_replicas=llm.max_replicas,
                       gpus=llm.tensor_parallel_size, efa=0, cpus=max(1, cpus), memory_gib=max(1, mem))


def worker_pod(name: str, shape: WorkerShape, group: InstanceGroup, replicas: int) -> Pod:
    """The pod of ``shape`` as the manifests write it (workloads/common/k8s.py worker_group)."""
    tolerations = [{"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect} for t in group.taints]
    if shape.gpus:
        tolerations.append({"key": names.GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"})
    return pod_from_spec(name, {
        "nodeSelector": {names.INSTANCE_TYPE_LABEL: shape.instance_type,
                         names.HYPERPOD_HEALTH_LABEL: names.HYPERPOD_HEALTHY},
        "tolerations": tolerations,
        "containers": [{"resources": {"requests": shape.resources, "limits": shape.resources}}],
    }, replicas=replicas)


def head_pod(name: str, *, autoscaler: bool) -> Pod:
    containers: list[dict[str, Any]] = [{"resources": {"requests": RAY_HEAD, "limits": RAY_HEAD}}]
    if autoscaler:
        containers.append({"resources": addons.RAY_AUTOSCALER_SIDECAR_RESOURCES})
    return pod_from_spec(name, {"nodeSelector": dict(names.SYSTEM_NODE_SELECTOR), "containers": containers})


def _llm_enabled(env: _Environment) -> bool:
    return env.inference.llm.enabled


def _services(env: _Environment) -> list[tuple[str, WorkerShape, InstanceGroup]]:
    out = []
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
    pods.append(pod_from_spec("coredns", {"nodeSelector": dict(names.SYSTEM_NODE_SELECTOR),
                                          "containers": [{"resources": addons.COREDNS_RESOURCES}]},
                              replicas=addons.COREDNS_REPLICAS))
    pods.append(pod_from_spec("kuberay-operator", {"nodeSelector": dict(names.SYSTEM_NODE_SELECTOR),
                                                   "containers": [{"resources": addons.KUBERAY_RESOURCES}]}))
    training = _training(env)
    if training is not None:
        name, shape, group = training
        pods.append(head_pod(f"{name} head", autoscaler=False))
        pods.append(pod_from_spec(f"{name} submitter", {"nodeSelector": dict(names.SYSTEM_NODE_SELECTOR),
                                                         "containers": [{"resources": RAY_JOB_SUBMITTER}]}))
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


# ---------------------------------------------------------------------------------------------
# Placing
# ---------------------------------------------------------------------------------------------


@dataclass
class _Node:
    pool: Pool
    index: int
    cpu: int
    memory: int
    gpus: int
    efa: int
    pods: int
    placed: list[str] = field(default_factory=list)

    def fits(self, pod: Pod) -> bool:
        return (pod.cpu_millis <= self.cpu and pod.memory_mib <= self.memory and pod.gpus <= self.gpus
                and pod.efa <= self.efa and self.pods >= 1)

    def take(self, pod: Pod) -> None:
        self.cpu -= pod.cpu_millis
        self.memory -= pod.memory_mib
        self.gpus -= pod.gpus
        self.efa -= pod.efa
        self.pods -= 1
        self.placed.append(pod.name)


def _requested(pod: Pod) -> str:
    parts = [f"cpu {_cpu(pod.cpu_millis)}", f"memory {_mem(pod.memory_mib)}"]
    if pod.gpus:
        parts.append(f"{names.GPU_RESOURCE} {pod.gpus}")
    if pod.efa:
        parts.append(f"{names.EFA_RESOURCE} {pod.efa}")
    return ", ".join(parts)


def _allocatable(pool: Pool) -> str:
    a = pool.allocatable
    parts = [f"cpu {_cpu(a.cpu_millis)}", f"memory {_mem(a.memory_mib)}", f"pods {a.pods}"]
    if pool.gpus:
        parts.append(f"{names.GPU_RESOURCE} {pool.gpus}")
    if pool.efa:
        parts.append(f"{names.EFA_RESOURCE} {pool.efa}")
    return ", ".join(parts)


@dataclass
class Placement:
    """The outcome of placing pods on pools: per node what is left, and every misfit."""

    situation: str
    pools: list[Pool]
    nodes: list[_Node]
    misfits: list[str]

    def used(self, pool: Pool) -> dict[str, int]:
        nodes = [n for n in self.nodes if n.pool.name == pool.name]
        a = pool.allocatable
        return {"cpu": sum(a.cpu_millis - n.cpu for n in nodes), "memory": sum(a.memory_mib - n.memory for n in nodes),
                "gpus": sum(pool.gpus - n.gpus for n in nodes), "pods": sum(a.pods - n.pods for n in nodes)}

    def pods_on(self, pool: Pool) -> dict[str, int]:
        counts: dict[str, int] = {}
        for n in self.nodes:
            if n.pool.name == pool.name:
                for p in n.placed:
                    counts[p] = counts.get(p, 0) + 1
        return counts


def place(pool_list: Sequence[Pool], pods: Iterable[Pod], *, situation: str = "as configured") -> Placement:
    """Place ``pods`` on the nodes of ``pool_list``: DaemonSets on every node they select, then the
    rest first-fit, largest first (GPUs, then CPU, then memory)."""
    nodes = [_Node(p, i, p.allocatable.cpu_millis, p.allocatable.memory_mib, p.gpus, p.efa, p.allocatable.pods)
             for p in pool_list for i in range(p.nodes)]
    misfits: list[str] = []
    pods = list(pods)
    for pod in pods:
        if not any(selects(pod, p) for p in pool_list):
            misfits.append(
                f"placement ({situation}): pod {pod.name!r} selects no node pool (nodeSelector "
                f"{dict(pod.node_selector)}, {len(pod.affinity)} node-affinity term(s), "
                f"{len(pod.tolerations)} toleration(s)); pools: {', '.join(p.name for p in pool_list)}")
    for pod in (p for p in pods if p.daemonset):
        for node in (n for n in nodes if selects(pod, n.pool)):
            if not node.fits(pod):
                misfits.append(_misfit(situation, pod, node.pool, [node]))
                continue
            node.take(pod)
    singles = [p for p in pods if not p.daemonset and any(selects(p, q) for q in pool_list)]
    for pod in sorted(singles, key=lambda p: (-p.gpus, -p.cpu_millis, -p.memory_mib)):
        eligible = [n for n in nodes if selects(pod, n.pool)]
        for _ in range(pod.replicas):
            node = next((n for n in eligible if n.fits(pod)), None)
            if node is None:
                pool = next(q for q in pool_list if selects(pod, q))
                misfits.append(_misfit(situation, pod, pool, eligible))
                break
            node.take(pod)
    return Placement(situation=situation, pools=list(pool_list), nodes=nodes, misfits=misfits)


def _misfit(situation: str, pod: Pod, pool: Pool, nodes: list[_Node]) -> str:
    placed = sum(1 for n in nodes for name in n.placed if name == pod.name)
    count = "one pod per node" if pod.daemonset else f"{placed} of {pod.replicas} placed"
    if nodes:
        best = max(nodes, key=lambda n: (n.gpus, n.cpu, n.memory))
        free = f"cpu {_cpu(best.cpu)}, memory {_mem(best.memory)}" + (
            f", {names.GPU_RESOURCE} {best.gpus}" if pool.gpus else "") + f", pods {best.pods}"
    else:
        free = "no nodes"
    return (f"placement ({situation}): pod {pod.name!r} does not fit node pool {pool.name!r} "
            f"({pool.nodes} x {pool.instance_type}, {count}): it requests {_requested(pod)}; a node's "
            f"allocatable is {_allocatable(pool)}; the most left on one node is {free}")


def situations(env: _Environment) -> list[Placement]:
    """The placements ``check_against`` checks: as configured, a RayService upgrade, and one
    node lost in each HyperPod group with nodes."""
    all_pools = pools(env)
    out = [place(all_pools, platform_pods(env), situation="as configured")]
    if env.inference.upgrade_strategy != "None" and _services(env):
        out.append(place(all_pools, platform_pods(env, "upgrade"), situation="RayService upgrade"))
    for g in env.hyperpod.instance_groups:
        if g.instance_count < 1 or not _known(g):
            continue
        fewer = [replace(p, nodes=p.nodes - 1) if p.name == g.name else p for p in all_pools]
        out.append(place(fewer, platform_pods(env, "node-loss", lost_group=g.name),
                         situation=f"HyperPod replacing a node of {g.name}"))
    return out


def check_against(env: _Environment) -> list[str]:
    """Every misfit in every situation, one line each (empty when everything fits)."""
    problems = pool_problems(env)
    if problems:
        return problems
    seen: list[str] = []
    for p in situations(env):
        seen.extend(m for m in p.misfits if m not in seen)
    return seen


def table(env: _Environment) -> list[list[str]]:
    """Rows (situation, pool, nodes, pods, CPU, memory, GPUs) of what each pool holds."""
    rows = []
    for p in situations(env):
        for pool in p.pools:
            used = p.used(pool)
            a = pool.allocatable
            pods = ", ".join(f"{n} x{c}" if c > 1 else n for n, c in sorted(p.pods_on(pool).items()))
            rows.append([
                p.situation, pool.name, f"{pool.nodes} x {pool.instance_type}", pods,
                f"{_cpu(used['cpu'])} / {_cpu(a.cpu_millis * pool.nodes)}",
                f"{_mem(used['memory'])} / {_mem(a.memory_mib * pool.nodes)}",
                f"{used['gpus']} / {pool.gpus * pool.nodes}",
            ])
    return rows


TABLE_HEADERS = ["Situation", "Pool", "Nodes", "Pods", "CPU used / allocatable", "Memory used / allocatable",
                 "GPUs used / allocatable"]


def render_table(env: _Environment) -> str:
    """The placement as text (``python -m config.placement ENV``, run by `make synth`)."""
    lines = [f"Placement of {env.name}: every pod on the node pool it selects (used / allocatable)"]
    for situation, pool, nodes, pods, cpu, mem, gpus in table(env):
        lines.append(f"  [{situation}] {pool} ({nodes}): cpu {cpu}, memory {mem}, gpus {gpus}")
        lines.append(f"      {pods or '(no pods)'}")
    return "\n".join(lines)
