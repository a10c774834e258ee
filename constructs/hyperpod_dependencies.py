"""What AWS requires on the EKS cluster before a HyperPod cluster is attached to it: the NVIDIA
and EFA device plugins, the health monitoring agent, and the deep-health-check, job-auto-restart
and hyperpod-patching permissions (in and for namespace ``aws-hyperpod``).

The device plugins come from their public chart repositories (pinned in config/versions.py). The
rest has no public chart repository: AWS ships it inside the HyperPod CLI's Git repository. This
app writes those objects itself from the documented facts (names, namespace, permissions, image)
instead of copying AWS's chart or cloning a Git repository at deploy time (see README "EKS").

Every function here is pure: tests validate the objects offline against Kubernetes schemas.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from constructs import Construct, IConstruct

from config import versions
from config.environment import EnvironmentConfig
from config.facts.addons import (
    DEVICE_PLUGIN_RESOURCES,
    HEALTH_MONITORING_AGENT_RESOURCES,
    HEALTH_MONITORING_AGENT_TOLERATIONS,
    hyperpod_node_tolerations,
    instance_type_affinity,
)
from config.facts.names import HYPERPOD_NAMESPACE, INSTANCE_TYPE_LABEL
from constructs.device_plugin_image import asset_hash as device_plugin_tag
from constructs.device_plugin_image import repository as device_plugin_repository
from constructs.eks_cluster import PlatformEksCluster
from constructs.helm import ChartRelease, HelmRelease

NVIDIA_RELEASE = "nvidia-device-plugin"
EFA_RELEASE = "aws-efa-k8s-device-plugin"
DEVICE_PLUGIN_NAMESPACE = "kube-system"
HEALTH_MONITORING_AGENT = "health-monitoring-agent"
DEEP_HEALTH_CHECK_SA = "deep-health-check-service-account"
JOB_AUTO_RESTART = "job-auto-restart"
HYPERPOD_PATCHING = "hyperpod-patching"
# The Kubernetes user HyperPod's service-linked role is mapped to; job auto-restart acts as it.
HYPERPOD_SERVICE_LINKED_USER = "hyperpod-service-linked-role"


def nvidia_device_plugin_values(config: EnvironmentConfig) -> dict[str, Any]:
    image = {}
    if config.network.images_from_ecr:
        # nvcr.io is out of reach and ECR cannot cache it: the CDK asset built FROM the pinned
        # upstream digest, published before the cluster stack deploys (constructs/device_plugin_image.py).
        image = {
            "image": {
                "repository": device_plugin_repository(config.account, config.region),
                "tag": device_plugin_tag(),
            }
        }
    return {
        **image,
        # Only the HyperPod GPU types of this environment: on CPU nodes the plugin crash-loops.
        "affinity": instance_type_affinity(config.gpu_device_plugin_instance_types()),
        "tolerations": hyperpod_node_tolerations(),
        "resources": DEVICE_PLUGIN_RESOURCES,
    }


def efa_device_plugin_values(config: EnvironmentConfig) -> dict[str, Any]:
    return {
        # This region's EKS add-on registry (reached through the VPC's ECR endpoints), with the
        # chart's own tag.
        "image": {"repository": versions.efa_device_plugin_repository(config.region)},
        # The chart builds its node affinity from these keys/values.
        "supportedInstanceLabels": {
            "keys": [INSTANCE_TYPE_LABEL],
            "values": config.efa_device_plugin_instance_types(),
        },
        "tolerations": hyperpod_node_tolerations(),
        "resources": DEVICE_PLUGIN_RESOURCES,
    }


def device_plugin_releases(config: EnvironmentConfig) -> list[ChartRelease]:
    """A release per device plugin that some HyperPod instance type of the environment needs."""
    plugins = (
        (
            config.gpu_device_plugin_instance_types,
            NVIDIA_RELEASE,
            versions.NVIDIA_DEVICE_PLUGIN,
            nvidia_device_plugin_values,
        ),
        (config.efa_device_plugin_instance_types, EFA_RELEASE, versions.EFA_DEVICE_PLUGIN, efa_device_plugin_values),
    )
    return [
        ChartRelease(release=release, pin=pin, namespace=DEVICE_PLUGIN_NAMESPACE, values=values(config))
        for instance_types, release, pin, values in plugins
        if instance_types()
    ]


# ---------------------------------------------------------------------------------------------
# Our own manifests for the parts without a public chart
# ---------------------------------------------------------------------------------------------

_LABELS = {"app.kubernetes.io/part-of": "hyperpod-ray", "app.kubernetes.io/managed-by": "aws-cdk"}


def _meta(name: str, namespace: str | None = None, **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {**_LABELS, **labels}}
    if namespace:
        meta["namespace"] = namespace
    return meta


def _rule(groups: list[str], resources: list[str], verbs: list[str]) -> dict[str, Any]:
    return {"apiGroups": groups, "resources": resources, "verbs": verbs}


def _cluster_role_binding(name: str, role: str, subject: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": _meta(name),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [subject],
    }


def _service_account(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(name, HYPERPOD_NAMESPACE)}


def hyperpod_namespace_manifest() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(HYPERPOD_NAMESPACE)}


def deep_health_check_manifests() -> list[dict[str, Any]]:
    """The account HyperPod's deep health checks run as: read nodes, read and patch pods."""
    role = f"{DEEP_HEALTH_CHECK_SA}-role"
    return [
        _service_account(DEEP_HEALTH_CHECK_SA),
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": _meta(role),
            "rules": [
                _rule([""], ["nodes"], ["get", "list"]),
                _rule([""], ["pods"], ["get", "list", "patch"]),
            ],
        },
        _cluster_role_binding(
            f"{role}-binding",
            role,
            {"kind": "ServiceAccount", "name": DEEP_HEALTH_CHECK_SA, "namespace": HYPERPOD_NAMESPACE},
        ),
    ]


def job_auto_restart_manifests() -> list[dict[str, Any]]:
    """What HyperPod's service-linked role needs to restart jobs whose node it replaced."""
    return [
        _service_account(JOB_AUTO_RESTART),
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": _meta(JOB_AUTO_RESTART),
            "rules": [
                _rule([""], ["nodes", "nodes/status", "pods", "pods/status"], ["get", "list", "watch"]),
                _rule([""], ["pods"], ["delete", "deletecollection"]),
                _rule([""], ["nodes", "nodes/status"], ["patch"]),
                _rule(["", "events.k8s.io"], ["events"], ["create"]),
                _rule(
                    ["kubeflow.org"],
                    ["pytorchjobs", "pytorchjobs/status"],
                    ["get", "list", "watch", "delete", "patch", "update"],
                ),
                _rule(["coordination.k8s.io"], ["leases"], ["get", "create", "update", "delete"]),
            ],
        },
        _cluster_role_binding(
            JOB_AUTO_RESTART,
            JOB_AUTO_RESTART,
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": HYPERPOD_SERVICE_LINKED_USER},
        ),
    ]


def hyperpod_patching_manifests() -> list[dict[str, Any]]:
    """What HyperPod's service-linked role needs to drain a node before patching its software:
    find its pods and evict them (AWS's chart enables this by default)."""
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": _meta(HYPERPOD_PATCHING),
            "rules": [
                _rule([""], ["pods"], ["list"]),
                _rule([""], ["pods/eviction"], ["create"]),
            ],
        },
        _cluster_role_binding(
            HYPERPOD_PATCHING,
            HYPERPOD_PATCHING,
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": HYPERPOD_SERVICE_LINKED_USER},
        ),
    ]


def health_monitoring_agent_manifests(config: EnvironmentConfig) -> list[dict[str, Any]]:
    """The agent that watches GPU/EFA/kernel logs on every HyperPod GPU node and labels or
    taints a node that fails (which makes HyperPod replace or reboot it)."""
    name = HEALTH_MONITORING_AGENT
    selector = {"app": name}
    host_paths = [
        ("log", "/var/log", "/var/log/", False),
        ("kmsg", "/dev/kmsg", "/dev/kmsg", True),
        ("localtime", "/etc/localtime", "/etc/localtime", True),
    ]
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _meta(name, HYPERPOD_NAMESPACE, app=name),
        "spec": {
            "selector": {"matchLabels": selector},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": {**_LABELS, **selector}},
                "spec": {
                    "serviceAccountName": name,
                    "affinity": instance_type_affinity(config.gpu_device_plugin_instance_types()),
                    # Everywhere on those nodes, whatever taint HyperPod or config puts on them.
                    "tolerations": [dict(t) for t in HEALTH_MONITORING_AGENT_TOLERATIONS],
                    "containers": [
                        {
                            "name": name,
                            "image": versions.health_monitoring_agent_image(config.region),
                            "imagePullPolicy": "IfNotPresent",
                            "resources": HEALTH_MONITORING_AGENT_RESOURCES,
                            "securityContext": {
                                "runAsUser": 1000,
                                "runAsGroup": 2000,
                                "allowPrivilegeEscalation": False,
                            },
                            "env": [
                                {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                                {"name": "NODE_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
                            ],
                            "volumeMounts": [
                                {"name": vol, "mountPath": mount, "readOnly": ro} for vol, mount, _, ro in host_paths
                            ],
                        }
                    ],
                    "volumes": [{"name": vol, "hostPath": {"path": path}} for vol, _, path, _ in host_paths],
                },
            },
        },
    }
    return [
        _service_account(name),
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": _meta(name),
            "rules": [
                _rule([""], ["nodes"], ["get"]),
                _rule([""], ["nodes", "nodes/status"], ["patch"]),
                _rule(["", "events.k8s.io"], ["events"], ["create", "patch", "update"]),
            ],
        },
        _cluster_role_binding(name, name, {"kind": "ServiceAccount", "name": name, "namespace": HYPERPOD_NAMESPACE}),
        daemonset,
    ]


def hyperpod_dependency_manifests(config: EnvironmentConfig) -> list[dict[str, Any]]:
    """Everything in ``aws-hyperpod`` (and its cluster-wide RBAC), in apply order."""
    manifests = [*deep_health_check_manifests(), *job_auto_restart_manifests(), *hyperpod_patching_manifests()]
    if config.gpu_device_plugin_instance_types():
        manifests += health_monitoring_agent_manifests(config)
    return manifests


class HyperPodDependencies(Construct):
    """Installs the HyperPod node dependencies; ``installed`` lists what HyperPod must wait for."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: PlatformEksCluster,
        manifests: Sequence[dict[str, Any]],
        releases: Sequence[ChartRelease],
    ) -> None:
        """``manifests``: the objects in ``aws-hyperpod`` and their cluster-wide RBAC
        (:func:`hyperpod_dependency_manifests`); ``releases``: the device plugin charts
        (:func:`device_plugin_releases`). Both rendered from the environment's config."""
        super().__init__(scope, construct_id)
        self.namespace = cluster.manifest(self, "Namespace", [hyperpod_namespace_manifest()], overwrite=True)
        self.manifests = cluster.manifest(self, "Manifests", list(manifests), overwrite=True)
        self.manifests.node.add_dependency(self.namespace)
        self.charts = [
            HelmRelease(self, _construct_id(release.release), cluster=cluster, release=release) for release in releases
        ]
        cluster.install(self.namespace)
        self.installed: tuple[IConstruct, ...] = (self.namespace, self.manifests, *self.charts)


def _construct_id(release: str) -> str:
    return "".join(part.capitalize() for part in release.split("-"))
