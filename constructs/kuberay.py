"""The KubeRay operator, installed from its public chart on the ``system`` node group."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from config import versions
from config.model import Eks
from constructs.helm import ChartRelease
from constructs.k8s_names import KUBERAY_NAMESPACE, SYSTEM_NODE_SELECTOR

KUBERAY_RELEASE = "kuberay-operator"

# One operator reconciles every RayCluster/RayJob/RayService of the platform: a few dozen objects.
# 100m/512Mi is the chart's own request; the limits leave headroom for reconcile bursts when
# HyperPod replaces nodes and many pods restart at once.
KUBERAY_RESOURCES = {
    "requests": {"cpu": "100m", "memory": "512Mi"},
    "limits": {"cpu": "1", "memory": "1Gi"},
}


def kuberay_operator_values(eks_config: Eks) -> dict[str, Any]:
    """Chart values: a pure function of config."""
    del eks_config  # nothing environment-specific yet; the signature keeps the contract
    return {
        # On the EKS managed 'system' nodes, never on HyperPod GPU nodes.
        "nodeSelector": dict(SYSTEM_NODE_SELECTOR),
        "resources": KUBERAY_RESOURCES,
        # Watch every namespace (the Ray workloads live in their own namespace).
        "singleNamespaceInstall": False,
    }


def kuberay_operator_release(eks_config: Eks) -> ChartRelease:
    pin = replace(versions.KUBERAY_OPERATOR, version=eks_config.kuberay_chart_version)
    return ChartRelease(
        release=KUBERAY_RELEASE,
        pin=pin,
        namespace=KUBERAY_NAMESPACE,
        values=kuberay_operator_values(eks_config),
    )
