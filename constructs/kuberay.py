"""The KubeRay operator, installed from its public chart on the ``system`` node group."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from config import versions
from config.eks import Eks
from config.environment import EnvironmentConfig
from config.facts.addons import KUBERAY_RESOURCES
from config.facts.names import KUBERAY_NAMESPACE, SYSTEM_NODE_SELECTOR, WORKLOADS_NAMESPACE
from constructs.helm import ChartRelease

KUBERAY_RELEASE = "kuberay-operator"


def operator_image_repository(config: EnvironmentConfig) -> str:
    """quay.io's operator image, or its ECR pull-through cache URI where network.images_from_ecr is on."""
    if not config.network.images_from_ecr:
        return versions.KUBERAY_OPERATOR_IMAGE
    return versions.ecr_image(versions.KUBERAY_OPERATOR_IMAGE, account=config.account, region=config.region)


def kuberay_operator_values(
    eks_config: Eks,
    *,
    watch_namespaces: tuple[str, ...] = (WORKLOADS_NAMESPACE,),
    image_repository: str = versions.KUBERAY_OPERATOR_IMAGE,
) -> dict[str, Any]:
    """Chart values: a pure function of config."""
    return {
        # The image of exactly the chart's release (the chart's own default would do the same;
        # pinning it here makes the running version visible in the template).
        "image": {"repository": image_repository, "tag": f"v{eks_config.kuberay_chart_version}"},
        # On the EKS managed 'system' nodes, never on HyperPod GPU nodes.
        "nodeSelector": dict(SYSTEM_NODE_SELECTOR),
        "resources": KUBERAY_RESOURCES,
        # Least privilege: namespaced RBAC in the Ray workloads' namespace only, instead of a
        # ClusterRole over every namespace (the CRDs stay cluster-scoped).
        "singleNamespaceInstall": True,
        "watchNamespace": list(watch_namespaces),
        "crNamespacedRbacEnable": True,
    }


def kuberay_operator_release(
    eks_config: Eks,
    *,
    team_namespaces: tuple[str, ...] = (),
    image_repository: str = versions.KUBERAY_OPERATOR_IMAGE,
) -> ChartRelease:
    """The operator watches the workloads' namespace and every team's (config teams): a RayJob in
    a namespace it does not watch is never reconciled."""
    pin = replace(versions.KUBERAY_OPERATOR, version=eks_config.kuberay_chart_version)
    return ChartRelease(
        release=KUBERAY_RELEASE,
        pin=pin,
        namespace=KUBERAY_NAMESPACE,
        values=kuberay_operator_values(
            eks_config,
            watch_namespaces=(WORKLOADS_NAMESPACE, *team_namespaces),
            image_repository=image_repository,
        ),
    )


# What the Ray autoscaler sidecar of an autoscaling head may do: the Role KubeRay 1.7 creates for
# each such RayCluster, named after it, and binds to the head's service account (the workloads'
# one here), in the cluster's namespace (ray-operator/controllers/ray/common/rbac.go BuildRole,
# BuildRoleBinding; raycluster_controller.go reconcileAutoscalerRole/RoleBinding at v1.7.0). The
# operator creates it, so this app writes no Role of its own; Kubernetes lets the operator grant
# only rules it holds itself, which tests/constructs/test_kuberay.py checks against the chart.
AUTOSCALER_ROLE_RULES: tuple[dict[str, list[str]], ...] = (
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": [""], "resources": ["pods/resize"], "verbs": ["patch"]},
    {"apiGroups": ["ray.io"], "resources": ["rayclusters"], "verbs": ["get", "patch"]},
)
