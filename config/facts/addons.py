"""The add-on pods the platform runs besides the Ray workloads: their sizes and scheduling.

The CDK constructs (constructs/kuberay.py, constructs/hyperpod_dependencies.py) write these into
chart values and manifests, and the placement check (sizing/placement.py) places the same pods,
so both read them from here. Pure values: importable without aws_cdk.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from config.facts.names import HYPERPOD_HEALTH_LABEL, INSTANCE_TYPE_LABEL, SYSTEM_NODE_SELECTOR

# One operator reconciles every RayCluster/RayJob/RayService of the platform: a few dozen objects.
# 100m/512Mi is the chart's own request; the limits leave headroom for reconcile bursts when
# HyperPod replaces nodes and many pods restart at once.
KUBERAY_RESOURCES = {
    "requests": {"cpu": "100m", "memory": "512Mi"},
    "limits": {"cpu": "1", "memory": "1Gi"},
}
# Device plugins are tiny gRPC servers; these bound them without starving the kubelet.
DEVICE_PLUGIN_RESOURCES = {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}}
# The agent's documented sizing (AWS's chart): 500m / 512Mi, requests equal to limits.
HEALTH_MONITORING_AGENT_RESOURCES = {
    "requests": {"cpu": "500m", "memory": "512Mi"},
    "limits": {"cpu": "500m", "memory": "512Mi"},
}
# The Ray autoscaler container KubeRay adds to a head pod when enableInTreeAutoscaling is on
# (KubeRay v1.7 ray-operator/controllers/ray/common/pod.go, BuildAutoscalerContainer).
RAY_AUTOSCALER_SIDECAR_RESOURCES = {
    "requests": {"cpu": "500m", "memory": "512Mi"},
    "limits": {"cpu": "500m", "memory": "512Mi"},
}

# EKS add-ons this app installs (constructs/eks_cluster.py), as their default manifests request.
# Add-ons whose requests are not known offline are counted as pods with no requests: they take a
# pod slot of every node and nothing else is assumed.
_EVERY_NODE = [{"operator": "Exists"}]
EKS_ADDON_DAEMONSETS: dict[str, dict[str, Any]] = {
    # aws-vpc-cni chart values: resources.requests.cpu 25m; tolerates every taint.
    "aws-node (vpc-cni)": {"requests": {"cpu": "25m"}},
    # The EKS kube-proxy add-on's DaemonSet requests 100m of CPU; tolerates every taint.
    "kube-proxy": {"requests": {"cpu": "100m"}},
    "eks-pod-identity-agent": {},
    "fsx-csi-node (aws-fsx-csi-driver)": {},
}
# The Secrets Store CSI driver add-on (aws-secrets-store-csi-driver-provider, installed with
# eks.ray_token_auth): two DaemonSets, the driver and the AWS provider (ASCP). Container requests
# as their charts set them: driver chart 1.6.0 values.yaml linux.driver/registrar/livenessProbe,
# ASCP chart 3.1.1 values.yaml resources (config/versions.py SECRETS_STORE_ADDON).
SECRETS_STORE_DAEMONSETS: dict[str, list[dict[str, Any]]] = {
    "secrets-store-csi-driver (aws-secrets-store-csi-driver-provider)": [
        {"requests": {"cpu": "50m", "memory": "100Mi"}, "limits": {"cpu": "200m", "memory": "200Mi"}},
        {"requests": {"cpu": "10m", "memory": "20Mi"}, "limits": {"cpu": "100m", "memory": "100Mi"}},
        {"requests": {"cpu": "10m", "memory": "20Mi"}, "limits": {"cpu": "100m", "memory": "100Mi"}},
    ],
    "secrets-store-csi-driver-provider-aws (aws-secrets-store-csi-driver-provider)": [
        {"requests": {"cpu": "50m", "memory": "100Mi"}, "limits": {"cpu": "50m", "memory": "100Mi"}},
    ],
}


def secrets_store_configuration() -> dict[str, Any]:
    """The add-on's configuration values: ASCP's chart values, with the driver subchart's under
    ``secrets-store-csi-driver`` (the add-on validates the provider's keys and passes the
    driver's through: Secrets Manager user guide, ascp-eks-installation.html)."""
    return {
        # A Ray pod's CSI mount needs both DaemonSets on its node, and Ray pods run on tainted
        # HyperPod nodes. ASCP's chart tolerates nothing by default (tolerations: []); the
        # driver's chart tolerates every taint (linux.tolerations), stated here so that both
        # follow this app rather than a chart default.
        "tolerations": every_node_tolerations(),
        "secrets-store-csi-driver": {
            "linux": {"tolerations": every_node_tolerations()},
            # KubeRay reads the token from a Kubernetes Secret: the driver writes the synced
            # Secret (SecretProviderClass secretObjects) only with syncSecret on.
            "syncSecret": {"enabled": True},
        },
    }


# CoreDNS (EKS add-on): two replicas of 100m / 70Mi (the upstream CoreDNS deployment's
# requests), pinned to the system nodes. Without a selector the add-on's Deployment may land on
# any Linux node, HyperPod's included, whose security group admits DNS over TCP only: a replica
# there would drop the UDP queries of the system pods and the Ray heads. The add-on takes
# ``replicaCount``, ``resources`` and ``nodeSelector`` as configuration values (EKS's schema for
# coredns, ``aws eks describe-addon-configuration --addon-name coredns``); the placement check
# (sizing/placement.py) places the pods these values describe.
COREDNS_REPLICAS = 2
COREDNS_RESOURCES = {"requests": {"cpu": "100m", "memory": "70Mi"}, "limits": {"memory": "170Mi"}}
COREDNS_CONFIGURATION: dict[str, Any] = {
    "replicaCount": COREDNS_REPLICAS,
    "resources": COREDNS_RESOURCES,
    "nodeSelector": dict(SYSTEM_NODE_SELECTOR),
}


def every_node_tolerations() -> list[dict[str, str]]:
    return [dict(t) for t in _EVERY_NODE]


def instance_type_affinity(instance_types: Sequence[str]) -> dict[str, Any]:
    """Required node affinity: only nodes whose instance type is one of ``instance_types``."""
    if not instance_types:
        raise ValueError("a device-plugin affinity needs at least one instance type")
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": sorted(instance_types)}
                        ]
                    }
                ]
            }
        }
    }


def hyperpod_node_tolerations() -> list[dict[str, str]]:
    """Tolerations for agents that must run on HyperPod nodes whatever their health status."""
    return [
        # HyperPod taints nodes under health checks or being replaced; the agents must stay.
        # (every effect, NoExecute included).
        {"key": HYPERPOD_HEALTH_LABEL, "operator": "Exists"},
        # Any NoSchedule taint: nvidia.com/gpu, vpc.amazonaws.com/efa and the instance-group
        # taints from config (for example a 'workload' taint on serving groups).
        {"operator": "Exists", "effect": "NoSchedule"},
    ]


# The health monitoring agent runs everywhere on the GPU nodes, whatever taint HyperPod or the
# config puts on them.
HEALTH_MONITORING_AGENT_TOLERATIONS = [
    {"operator": "Exists", "effect": "NoSchedule"},
    {"operator": "Exists", "effect": "NoExecute"},
]
