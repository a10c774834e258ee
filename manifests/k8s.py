"""Building blocks of the KubeRay manifests (RayJob for training, RayService for inference).

The names here are the contract between the infrastructure (the EKS stack creates the
namespace, the service account with its Pod Identity association and the FSx PVC) and the
jobs: import them, never retype them.
"""

from __future__ import annotations

import json
from typing import Any

from config import catalog
from config.facts import names
from sizing.pods import RAY_HEAD, RAY_HEAD_START_PARAMS, WorkerShape, worker_scheduling

# The Ray release the workloads are written for (Ray 2.60.0, Python 3.11). Every pod runs the
# workloads image built from workloads/Dockerfile on it (manifests.image), never a bare
# Ray image; tests/workloads/test_image.py keeps the Dockerfile's base on this release.
RAY_VERSION = "2.60.0"
# Ray Serve LLM (ray.serve.llm with its matching vLLM) of the same Ray release: the LLM RayService.
# Since Ray 2.56 the ray-llm release images are Python 3.12 + CUDA 13.0 only (vLLM publishes no
# CUDA 12.8 wheels any more); docs/workloads.md "The Ray Serve LLM service" gives the evidence.
RAY_LLM_IMAGE = f"rayproject/ray-llm:{RAY_VERSION}-py312-cu130"

# The names the EKS stack creates (config/facts/names.py), under the names the manifests use.
NAMESPACE = names.WORKLOADS_NAMESPACE
SERVICE_ACCOUNT = names.WORKLOADS_SERVICE_ACCOUNT
FSX_PVC = names.FSX_PVC
SYSTEM_NODE_SELECTOR = names.SYSTEM_NODE_SELECTOR
GPU_RESOURCE = names.GPU_RESOURCE
EFA_RESOURCE = names.EFA_RESOURCE
# KubeRay labels every Ray pod with its node type: head or worker.
NODE_TYPE_LABEL = "ray.io/node-type"


def labels(app: str, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": app,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": "hyperpod-ray",
    }


def efa_nccl_env(instance_type: str, efa_interfaces: int) -> list[dict[str, str]]:
    """The libfabric/NCCL environment for EFA (empty for types without EFA)."""
    env = [
        {"name": "NCCL_DEBUG", "value": "WARN"},
        # Bootstrap over the pod network, never loopback or the docker bridge.
        {"name": "NCCL_SOCKET_IFNAME", "value": "^lo,docker"},
    ]
    if efa_interfaces:
        env += [
            {"name": "FI_PROVIDER", "value": "efa"},
            # Ray forks worker processes; libfabric must be fork-safe.
            {"name": "FI_EFA_FORK_SAFE", "value": "1"},
            # aws-ofi-nccl (1.12+) renames its network to "OFI" when NCCL_NET asks for it (matched case-
            # insensitively), so a missing plugin fails loudly instead of falling back to sockets.
            {"name": "NCCL_NET", "value": "ofi"},
        ]
        if catalog.efa_gpudirect_rdma(instance_type):
            env.append({"name": "FI_EFA_USE_DEVICE_RDMA", "value": "1"})
    return env


def fsx_volume() -> dict[str, Any]:
    return {"name": "fsx", "persistentVolumeClaim": {"claimName": FSX_PVC}}


def shm_volume(size_gib: int) -> dict[str, Any]:
    # NCCL and the Ray object store need more shared memory than the container default (64 MiB).
    return {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{size_gib}Gi"}}


def volume_mounts() -> list[dict[str, Any]]:
    return [{"name": "fsx", "mountPath": names.FSX_MOUNT_PATH}, {"name": "dshm", "mountPath": "/dev/shm"}]


def ray_container(
    name: str,
    image: str,
    *,
    cpu: str,
    memory: str,
    env: list[dict[str, Any]] | None = None,
    extra_resources: dict[str, str] | None = None,
    ports: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
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


def head_group(
    image: str,
    *,
    app: str,
    env: list[dict[str, Any]] | None = None,
    ports: list[dict[str, Any]] | None = None,
    resources: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The Ray head on the EKS `system` nodes, schedulable for no Ray work (num-cpus 0), with
    ``resources`` (cpu, memory; default ``RAY_HEAD``: the training head's come from the plan)."""
    res = resources or RAY_HEAD
    return {
        "rayStartParams": {**RAY_HEAD_START_PARAMS, "dashboard-host": "0.0.0.0"},
        "template": {
            "metadata": {"labels": labels(app, "ray-head")},
            "spec": {
                "serviceAccountName": SERVICE_ACCOUNT,
                "nodeSelector": dict(SYSTEM_NODE_SELECTOR),
                "containers": [
                    ray_container(
                        "ray-head",
                        image,
                        cpu=res["cpu"],
                        memory=res["memory"],
                        env=env,
                        ports=ports
                        or [
                            {"containerPort": 6379, "name": "gcs"},
                            {"containerPort": 8265, "name": "dashboard"},
                            {"containerPort": 10001, "name": "client"},
                        ],
                    )
                ],
                "volumes": [fsx_volume(), shm_volume(4)],
            },
        },
    }


def worker_group(
    shape: WorkerShape,
    *,
    group_name: str,
    image: str,
    app: str,
    taints: list[Any] | None = None,
    env: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Worker pods of ``shape`` (sized from the node pool in sizing/pods.py; sizing/placement.py checks
    that they fit) on the HyperPod nodes of its instance type; only nodes HyperPod reports
    healthy are eligible."""
    extra = {k: v for k, v in shape.resources.items() if k not in ("cpu", "memory")}
    spec: dict[str, Any] = {
        "serviceAccountName": SERVICE_ACCOUNT,
        **worker_scheduling(shape, taints or []),
        "containers": [
            ray_container(
                "ray-worker",
                image,
                cpu=str(shape.cpus),
                memory=f"{shape.memory_gib}Gi",
                env=efa_nccl_env(shape.instance_type, shape.efa) + list(env or []),
                extra_resources=extra,
            )
        ],
        "volumes": [fsx_volume(), shm_volume(shape.shm_gib)],
    }
    return {
        "groupName": group_name,
        "replicas": shape.min_replicas,
        "minReplicas": shape.min_replicas,
        "maxReplicas": shape.max_replicas,
        "rayStartParams": shape.ray_start_params,
        "template": {"metadata": {"labels": labels(app, "ray-worker")}, "spec": spec},
    }


def metadata(name: str, app: str) -> dict[str, Any]:
    return {"name": name, "namespace": NAMESPACE, "labels": labels(app, "ray")}


def env_list(values: dict[str, str]) -> list[dict[str, str]]:
    return [{"name": k, "value": str(v)} for k, v in sorted(values.items())]


def runtime_env_yaml(env_vars: dict[str, str]) -> str:
    """RayJob/RayService runtimeEnvYAML (JSON is valid YAML; stable key order)."""
    return json.dumps({"env_vars": dict(sorted(env_vars.items()))}, indent=2)
