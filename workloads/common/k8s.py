"""Building blocks of the KubeRay manifests (RayJob for training, RayService for inference).

The names here are the contract between the infrastructure (the EKS stack creates the
namespace, the service account with its Pod Identity association and the FSx PVC) and the
jobs: import them, never retype them.
"""

from __future__ import annotations

import json
from typing import Any

# The Ray release the workloads are written for (Ray 2.60.0, Python 3.11). Every pod runs the
# workloads image built from workloads/Dockerfile on it (workloads.common.image), never a bare
# Ray image; tests/workloads/test_image.py keeps the Dockerfile's base on this release.
RAY_VERSION = "2.60.0"
# Ray Serve LLM (ray.serve.llm with its matching vLLM) of the same Ray release: the LLM RayService.
RAY_LLM_IMAGE = f"rayproject/ray-llm:{RAY_VERSION}-py311-cu128"

NAMESPACE = "ray-workloads"
SERVICE_ACCOUNT = "ray-workloads"
# The PersistentVolumeClaim bound to the FSx for Lustre file system, and where pods mount it.
FSX_PVC = "fsx-claim"
FSX_MOUNT_PATH = "/fsx"
# The EKS managed node group that runs the KubeRay operator and the Ray head pods.
SYSTEM_NODEGROUP = "system"
SYSTEM_NODE_SELECTOR = {"eks.amazonaws.com/nodegroup": SYSTEM_NODEGROUP}
# Labels HyperPod puts on its nodes; only healthy nodes are schedulable for workers.
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
HEALTH_LABEL = "sagemaker.amazonaws.com/node-health-status"
HEALTHY = "Schedulable"
GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
# Instance families whose EFA supports GPUDirect RDMA (FI_EFA_USE_DEVICE_RDMA=1).
_RDMA_FAMILIES = ("ml.p4d.", "ml.p4de.", "ml.p5.", "ml.p5e.", "ml.p5en.", "ml.p6-", "ml.p6e-")

# Head pod size: the head runs the GCS, dashboard and the Train controller, no training.
HEAD_CPU = "4"
HEAD_MEMORY = "16Gi"
# Left on every HyperPod node for the kubelet, HyperPod agents and device plugins.
NODE_RESERVED_CPU = 4
NODE_RESERVED_MEMORY_GIB = 32


def labels(app: str, component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": app, "app.kubernetes.io/component": component,
            "app.kubernetes.io/part-of": "hyperpod-ray"}


def efa_nccl_env(instance_type: str, efa_interfaces: int) -> list[dict[str, str]]:
    """The libfabric/NCCL environment for EFA (empty for types without EFA)."""
    env = [{"name": "NCCL_DEBUG", "value": "WARN"},
           # Bootstrap over the pod network, never loopback or the docker bridge.
           {"name": "NCCL_SOCKET_IFNAME", "value": "^lo,docker"}]
    if efa_interfaces:
        env += [
            {"name": "FI_PROVIDER", "value": "efa"},
            # Ray forks worker processes; libfabric must be fork-safe.
            {"name": "FI_EFA_FORK_SAFE", "value": "1"},
            {"name": "NCCL_NET", "value": "ofi"},
        ]
        if instance_type.startswith(_RDMA_FAMILIES):
            env.append({"name": "FI_EFA_USE_DEVICE_RDMA", "value": "1"})
    return env


def fsx_volume() -> dict[str, Any]:
    return {"name": "fsx", "persistentVolumeClaim": {"claimName": FSX_PVC}}


def shm_volume(size_gib: int) -> dict[str, Any]:
    # NCCL and the Ray object store need more shared memory than the container default (64 MiB).
    return {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{size_gib}Gi"}}


def volume_mounts() -> list[dict[str, Any]]:
    return [{"name": "fsx", "mountPath": FSX_MOUNT_PATH}, {"name": "dshm", "mountPath": "/dev/shm"}]


def ray_container(name: str, image: str, *, cpu: str, memory: str, env: list[dict] | None = None,
                  extra_resources: dict[str, str] | None = None,
                  ports: list[dict] | None = None) -> dict[str, Any]:
    limits = {"cpu": cpu, "memory": memory, **(extra_resources or {})}
    container: dict[str, Any] = {
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "resources": {"requests": dict(limits), "limits": dict(limits)},
        "env": list(env or []),
        "volumeMounts": volume_mounts(),
        # Let the raylet drain before the container stops.
        "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", "ray stop"]}}},
    }
    if ports:
        container["ports"] = ports
    return container


def head_group(image: str, *, app: str, env: list[dict] | None = None,
               ports: list[dict] | None = None) -> dict[str, Any]:
    """The Ray head on the EKS `system` nodes, schedulable for no Ray work (num-cpus 0)."""
    return {
        "rayStartParams": {"num-cpus": "0", "dashboard-host": "0.0.0.0"},
        "template": {
            "metadata": {"labels": labels(app, "ray-head")},
            "spec": {
                "serviceAccountName": SERVICE_ACCOUNT,
                "nodeSelector": dict(SYSTEM_NODE_SELECTOR),
                "containers": [ray_container("ray-head", image, cpu=HEAD_CPU, memory=HEAD_MEMORY,
                                             env=env, ports=ports or [
                                                 {"containerPort": 6379, "name": "gcs"},
                                                 {"containerPort": 8265, "name": "dashboard"},
                                                 {"containerPort": 10001, "name": "client"}])],
                "volumes": [fsx_volume(), shm_volume(4)],
            },
        },
    }


def worker_group(*, group_name: str, instance_type: str, replicas: int, gpus_per_node: int,
                 efa_interfaces: int, vcpus: int, memory_gib: int, image: str, app: str,
                 taints: list | None = None, env: list[dict] | None = None) -> dict[str, Any]:
    """One Ray worker pod per HyperPod instance of ``instance_type``, taking all its GPUs and EFA
    interfaces; only nodes HyperPod reports healthy are eligible."""
    extra: dict[str, str] = {}
    if gpus_per_node:
        extra[GPU_RESOURCE] = str(gpus_per_node)
    if efa_interfaces:
        extra[EFA_RESOURCE] = str(efa_interfaces)
    cpu = max(1, vcpus - NODE_RESERVED_CPU)
    mem = max(4, memory_gib - NODE_RESERVED_MEMORY_GIB)
    tolerations = [{"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect}
                   for t in (taints or [])]
    if gpus_per_node:
        tolerations.append({"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"})
    spec: dict[str, Any] = {
        "serviceAccountName": SERVICE_ACCOUNT,
        "nodeSelector": {INSTANCE_TYPE_LABEL: instance_type, HEALTH_LABEL: HEALTHY},
        "tolerations": tolerations,
        "containers": [ray_container("ray-worker", image, cpu=str(cpu), memory=f"{mem}Gi",
                                     env=efa_nccl_env(instance_type, efa_interfaces) + list(env or []),
                                     extra_resources=extra)],
        "volumes": [fsx_volume(), shm_volume(max(8, mem // 4))],
    }
    return {
        "groupName": group_name,
        "replicas": replicas,
        "minReplicas": replicas,
        "maxReplicas": replicas,
        "rayStartParams": {"num-gpus": str(gpus_per_node)} if gpus_per_node else {},
        "template": {"metadata": {"labels": labels(app, "ray-worker")}, "spec": spec},
    }


def metadata(name: str, app: str) -> dict[str, Any]:
    return {"name": name, "namespace": NAMESPACE, "labels": labels(app, "ray")}


def env_list(values: dict[str, str]) -> list[dict[str, str]]:
    return [{"name": k, "value": str(v)} for k, v in sorted(values.items())]


def runtime_env_yaml(env_vars: dict[str, str]) -> str:
    """RayJob/RayService runtimeEnvYAML (JSON is valid YAML; stable key order)."""
    return json.dumps({"env_vars": dict(sorted(env_vars.items()))}, indent=2)
