"""What keeps a RayService serving when its head or a node goes: GCS fault tolerance and
PodDisruptionBudgets, rendered from the environment config.

GCS fault tolerance (config ``inference.gcs_fault_tolerance``; the store is
constructs/gcs_store.py): the head's GCS keeps the cluster's metadata in ElastiCache for Valkey,
so a new head pod recovers it and the worker pods, their Serve replicas and proxies keep serving
meanwhile (Ray's "GCS fault tolerance" guide; KubeRay's RayService high-availability guide).
KubeRay 1.7 sets, from ``gcsFaultToleranceOptions``, on the head container: ``RAY_REDIS_ADDRESS``
(``redisAddress``), ``REDIS_PASSWORD`` from ``redisPassword`` and ``--redis-password
$REDIS_PASSWORD``, and ``RAY_external_storage_namespace``; on the workers a 600 s GCS reconnect
timeout (ray-operator/controllers/ray/common/pod.go at v1.7.0, configureGCSFaultTolerance).

- ``redisAddress``: ``rediss://`` (TLS; Ray's ``get_address`` turns on SSL for that scheme) to
  the ExternalName Service in front of the store's primary endpoint.
- ``redisPassword``: a ``secretKeyRef`` to the Kubernetes Secret the Secrets Store CSI driver
  syncs from Secrets Manager (SecretProviderClass ``SECRET_PROVIDER_CLASS``; the head mounts its
  volume, since the driver keeps a synced Secret only while a pod mounts it). KubeRay's Redis
  cleanup job is built from the head pod, volume included. No manifest holds the token.
- ``externalStorageNamespace`` is left to KubeRay: the RayCluster's UID. One store serves every
  RayService, and each cluster, the new one of a NewCluster upgrade included, gets its own
  namespace in it (a fixed name would let the old and the new cluster of an upgrade share one).

PodDisruptionBudgets (``disruption_budgets``): voluntary evictions (node drains, node group
updates) take at most one head and at most one Serve worker pod of a service at a time. The head
is evictable on purpose: with GCS fault tolerance its loss does not stop the service, and a
budget that forbids it would block every update of the system node group.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from config.environment import EnvironmentConfig
from config.facts.names import (
    GCS_STORE_PORT,
    GCS_STORE_SECRET,
    GCS_STORE_SERVICE,
    gcs_store_secret_name,
)
from manifests import k8s, security

GCS_STORE_SECRET_KEY = "auth_token"
SECRET_PROVIDER_CLASS = "ray-gcs-store"
_VOLUME = "ray-gcs-store-auth"
_MOUNT = "/var/run/secrets/ray-gcs-store"


def redis_address() -> str:
    return f"rediss://{GCS_STORE_SERVICE}.{k8s.NAMESPACE}.svc.cluster.local:{GCS_STORE_PORT}"


def gcs_fault_tolerance_options() -> dict[str, Any]:
    return {
        "redisAddress": redis_address(),
        "redisPassword": {"valueFrom": {"secretKeyRef": {"name": GCS_STORE_SECRET, "key": GCS_STORE_SECRET_KEY}}},
    }


def with_gcs_fault_tolerance(cluster_spec: dict[str, Any]) -> dict[str, Any]:
    """``cluster_spec`` (a RayService's ``rayClusterConfig``) with ``gcsFaultToleranceOptions``
    and, on the head, the CSI volume that keeps the token's Secret synced."""
    spec = copy.deepcopy(cluster_spec)
    spec["gcsFaultToleranceOptions"] = gcs_fault_tolerance_options()
    head = spec["headGroupSpec"]["template"]["spec"]
    head.setdefault("volumes", []).append(
        {
            "name": _VOLUME,
            "csi": {
                "driver": "secrets-store.csi.k8s.io",
                "readOnly": True,
                "volumeAttributes": {"secretProviderClass": SECRET_PROVIDER_CLASS},
            },
        }
    )
    head["containers"][0].setdefault("volumeMounts", []).append(
        {"name": _VOLUME, "mountPath": _MOUNT, "readOnly": True}
    )
    return spec


def render_secret_provider_class(cfg: EnvironmentConfig) -> dict[str, Any]:
    """``python -m manifests render gcs-store-secret-provider-class --env NAME``: syncs the
    Secrets Manager AUTH token into ``GCS_STORE_SECRET`` with the head pod's Pod Identity."""
    if not cfg.gcs_fault_tolerance:
        from config import ConfigError

        raise ConfigError(
            f"{cfg.name}.yaml",
            [
                f"inference.gcs_fault_tolerance.enabled: {json.dumps(cfg.inference.gcs_fault_tolerance.enabled)} with "
                f"eks.ray_token_auth: {json.dumps(cfg.eks.ray_token_auth)} in {cfg.name}.yaml leaves GCS fault "
                "tolerance off, so there is no store token to sync; set enabled: true or null, with "
                "eks.ray_token_auth: true, to render it"
            ],
        )
    secret = security.SyncedSecret(gcs_store_secret_name(cfg.name_prefix), GCS_STORE_SECRET, GCS_STORE_SECRET_KEY)
    return security.secret_provider_class(
        [secret], region=cfg.region, name=SECRET_PROVIDER_CLASS, component="gcs-store"
    )


def disruption_budgets(name: str, app: str) -> list[dict[str, Any]]:
    """PodDisruptionBudgets of the RayService ``name`` (app label ``app``): its heads, and its
    Serve worker pods."""
    out = []
    for role, node_type in (("head", "head"), ("serve", "worker")):
        out.append(
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": f"{name}-{role}", "namespace": k8s.NAMESPACE, "labels": k8s.labels(app, "ray")},
                "spec": {
                    "maxUnavailable": 1,
                    "selector": {"matchLabels": {security.WORKLOAD_LABEL: name, k8s.NODE_TYPE_LABEL: node_type}},
                    # A pod that is not ready serves nothing: its eviction must not wait on the budget.
                    "unhealthyPodEvictionPolicy": "AlwaysAllow",
                },
            }
        )
    return out
