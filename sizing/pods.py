"""The node pools and the platform's pods, sized from the pools.

Node pools come from the config: the EKS `system` node group and each HyperPod instance group,
with what one node offers to pods (``catalog.node_allocatable``: vCPUs at the group's
threads-per-core, the EKS AMI's kube-reserved, eviction threshold and max pods), its labels and
its taints. The workload pods are sized here, from the pools (``training_worker``,
``serve_worker``, ``llm_worker``, ``job_worker``, ``training_head``, ``RAY_HEAD``); sizing/plan.py calls them once
per environment and the KubeRay manifests read the plan: what is checked is what is rendered.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from config import catalog
from config.eks import Eks
from config.environment import EnvironmentConfig
from config.facts import addons, names
from config.hyperpod import InstanceGroup, Taint
from sizing.demand import ACCELERATOR_RESOURCE_PREFIX
from sizing.scheduling import Pod, Pool, pod_from_spec, selects
from sizing.training import TrainingPlacement

# A Ray head runs the GCS, the dashboard and the job's driver or Serve's controller, no Ray
# work (num-cpus 0). The services' heads and a team job's head: one CPU and 4 GiB; several
# heads share each `system` node (training, each service, twice during an upgrade).
RAY_HEAD = {"cpu": "1", "memory": "4Gi"}
# Its Ray resources: no CPUs, so no Ray work lands on it.
RAY_HEAD_START_PARAMS = {"num-cpus": "0"}
# The training head grows with its cluster (``training_head``) up to Ray's starting point for a
# large cluster's head, 8 CPUs and 32 GB (docs.ray.io, "Best practices for deploying large
# clusters", "Configuring the head node"), with memory in that ratio.
HEAD_MAX_CPUS = 8
HEAD_GIB_PER_CPU = 4


@dataclass(frozen=True)
class HeadShape:
    """What a Ray head pod requests (and is limited to)."""

    cpus: int
    memory_gib: int

    @property
    def resources(self) -> dict[str, str]:
        return {"cpu": str(self.cpus), "memory": f"{self.memory_gib}Gi"}


def training_head(worker_nodes: int) -> HeadShape:
    """The training RayJob's head for ``worker_nodes`` worker pods (Ray nodes): one CPU and 4 GiB
    per worker node, at least one, at most Ray's large-cluster head (8 CPUs, 32 GiB). Each worker
    node adds a raylet and a dashboard agent reporting to the head's GCS and dashboard, and its
    Ray Train workers (up to one per GPU) to the Train controller's poll, which runs in the head
    pod with the driver; a node's worth of workers per CPU reaches Ray's large-cluster head at
    8 nodes (64 GPUs of an 8-GPU type)."""
    cpus = min(HEAD_MAX_CPUS, max(1, worker_nodes))
    return HeadShape(cpus=cpus, memory_gib=HEAD_GIB_PER_CPU * cpus)


# A serving replica without GPUs still holds the model, the batch and the HTTP buffers.
MIN_SERVE_MEMORY_GIB = 4


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


def known(group: InstanceGroup) -> bool:
    try:
        hyperpod_pool(group)
    except KeyError:
        return False
    return True


def pools(env: EnvironmentConfig) -> list[Pool]:
    """The `system` pool and every HyperPod group with hardware facts in the catalog."""
    return [system_pool(env.eks)] + [hyperpod_pool(g) for g in env.hyperpod.instance_groups if known(g)]


def daemonsets(env: EnvironmentConfig) -> list[Pod]:
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


def free_per_node(env: EnvironmentConfig, group: InstanceGroup) -> tuple[int, int]:
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
    # Ray's name for the GPU (``accelerator_type:<name>``) that the pod's replicas ask for; the
    # group then declares it, as a Ray node on that GPU advertises it (see ``ray_start_params``).
    accelerator_type: str | None = None

    @property
    def resources(self) -> dict[str, str]:
        res = {"cpu": str(self.cpus), "memory": f"{self.memory_gib}Gi"}
        if self.gpus:
            res[names.GPU_RESOURCE] = str(self.gpus)
        if self.efa:
            res[names.EFA_RESOURCE] = str(self.efa)
        return res

    @property
    def ray_resources(self) -> dict[str, int]:
        """The custom Ray resources the group declares. KubeRay's autoscaler (v1) knows a worker
        type only by its spec (rayStartParams, container limits), never by what running nodes
        advertise: a resource the replicas ask for must be declared here, else the autoscaler
        finds no worker type for them (sizing/autoscaling.py checks it). A Ray node advertises
        1 of its GPU's accelerator type, whatever its GPU count."""
        return {f"{ACCELERATOR_RESOURCE_PREFIX}{self.accelerator_type}": 1} if self.accelerator_type else {}

    @property
    def ray_start_params(self) -> dict[str, str]:
        """The worker group's rayStartParams: its GPUs, CPUs and custom resources, so that the
        autoscaler's node type is what the pod holds. ``resources`` takes the form KubeRay's
        autoscaler reads: a JSON object inside one pair of escaped quotes."""
        params = {"num-gpus": str(self.gpus)} if self.gpus else {}
        params["num-cpus"] = str(self.cpus)
        if self.ray_resources:
            text = json.dumps(self.ray_resources, sort_keys=True)
            params["resources"] = '"' + text.replace('"', '\\"') + '"'
        return params

    @property
    def shm_gib(self) -> int:
        """/dev/shm of the pod (a memory-backed emptyDir): a quarter of its memory, at least 8 GiB."""
        return max(8, self.memory_gib // 4)


def _share(env: EnvironmentConfig, group: InstanceGroup, gpus: int) -> tuple[int, int, int]:
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


def training_worker(env: EnvironmentConfig, p: TrainingPlacement) -> WorkerShape:
    """The RayJob's worker pod for the workers ``p``: one per node, holding that node's Ray Train
    workers, their GPUs and the node's free CPU and memory in proportion (all of it when they
    take every GPU). Workers without GPUs get one CPU each and memory in the node's proportion."""
    group = env.hyperpod.group(p.group)
    per_pod = min(p.workers, p.workers_per_node)
    gpus = per_pod * p.gpus_per_worker
    if gpus:
        cpus, mem, efa = _share(env, group, gpus)
    else:
        free_cpu, free_mem = free_per_node(env, group)
        cpus, efa = per_pod, 0
        mem = max(1, int(free_mem * cpus * 1000 / free_cpu) // 1024)
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


def job_worker(env: EnvironmentConfig, group: InstanceGroup, nodes: int) -> WorkerShape:
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


def cpu_job_worker(env: EnvironmentConfig, group: InstanceGroup, nodes: int, cpus: int) -> WorkerShape:
    """The worker pod of a CPU-only RayJob (the pretokenize job): ``cpus`` CPUs, no GPU, and the
    node's free memory in proportion to those CPUs, one pod on each of ``nodes`` nodes."""
    free_cpu, free_mem = free_per_node(env, group)
    return WorkerShape(
        group=group.name,
        instance_type=group.instance_type,
        min_replicas=nodes,
        max_replicas=nodes,
        gpus=0,
        efa=0,
        cpus=cpus,
        memory_gib=max(1, int(free_mem * cpus * 1000 / max(1, free_cpu)) // 1024),
        per_pod=1,
    )


def serve_worker(env: EnvironmentConfig) -> WorkerShape:
    """The generation RayService's worker pod: the GPUs of its replicas, their CPUs plus one for
    Ray, and the node's free memory in proportion to those GPUs."""
    inf = env.inference
    group = inf.resolved_instance_group(env.hyperpod)
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


def llm_worker(env: EnvironmentConfig) -> WorkerShape:
    """The Serve LLM RayService's worker pod: one engine's GPUs (tensor_parallel_size) with the
    node's free CPU and memory in proportion."""
    llm = env.inference.llm
    group = env.inference.resolved_llm_group(env.hyperpod)
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
        # Serve LLM's engines ask for the GPU type by name (LLMConfig.accelerator_type).
        accelerator_type=catalog.ray_accelerator_type(group.instance_type),
    )


def worker_scheduling(shape: WorkerShape, taints: Sequence[Taint]) -> dict[str, Any]:
    """Where the worker pods of ``shape`` may run, as the PodSpec fields ``nodeSelector`` and
    ``tolerations``: HyperPod nodes of its instance type that HyperPod reports healthy, the
    group's ``taints`` tolerated, and the GPU taint where the pods take GPUs. The manifests
    (manifests/k8s.py worker_group) and the placement check (``worker_pod``) both read it."""
    tolerations = [{"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect} for t in taints]
    if shape.gpus:
        tolerations.append({"key": names.GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"})
    return {
        "nodeSelector": {
            names.INSTANCE_TYPE_LABEL: shape.instance_type,
            names.HYPERPOD_HEALTH_LABEL: names.HYPERPOD_HEALTHY,
        },
        "tolerations": tolerations,
    }


def worker_pod(name: str, shape: WorkerShape, group: InstanceGroup, replicas: int) -> Pod:
    """The pod of ``shape`` as the manifests write it (manifests/k8s.py worker_group)."""
    return pod_from_spec(
        name,
        {
            **worker_scheduling(shape, group.taints),
            "containers": [{"resources": {"requests": shape.resources, "limits": shape.resources}}],
        },
        replicas=replicas,
    )


def head_pod(name: str, *, autoscaler: bool, resources: dict[str, str] | None = None) -> Pod:
    """A Ray head pod on the `system` nodes: ``resources`` (default ``RAY_HEAD``) as the
    manifests write them (manifests/k8s.py head_group)."""
    res = resources or RAY_HEAD
    containers: list[dict[str, Any]] = [{"resources": {"requests": res, "limits": res}}]
    if autoscaler:
        containers.append({"resources": addons.RAY_AUTOSCALER_SIDECAR_RESOURCES})
    return pod_from_spec(name, {"nodeSelector": dict(names.SYSTEM_NODE_SELECTOR), "containers": containers})
