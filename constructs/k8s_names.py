"""Kubernetes names shared by the infrastructure and the Ray workloads.

The same values are defined by the workloads in ``workloads/common/k8s.py`` (NAMESPACE,
SERVICE_ACCOUNT, FSX_PVC, SYSTEM_NODEGROUP); ``tests/constructs/test_workloads_access.py``
checks that the two agree once both are on main. CDK code never imports Ray, so it does not
import that module.
"""

from __future__ import annotations

# Namespace and service account of the Ray workloads (RayJob, RayService).
WORKLOADS_NAMESPACE = "ray-workloads"
WORKLOADS_SERVICE_ACCOUNT = "ray-workloads"
# The ReadWriteMany claim bound to the FSx for Lustre file system.
FSX_PVC = "fsx-claim"
FSX_STORAGE_CLASS = "fsx-lustre-static"
# The EKS managed node group for the KubeRay operator, Ray head pods and CoreDNS.
SYSTEM_NODEGROUP = "system"
SYSTEM_NODE_SELECTOR = {"eks.amazonaws.com/nodegroup": SYSTEM_NODEGROUP}
# Namespace AWS requires for HyperPod's agents and permissions (it "cannot be modified").
HYPERPOD_NAMESPACE = "aws-hyperpod"
# The operator's namespace.
KUBERAY_NAMESPACE = "kuberay-system"
# Label and taint HyperPod puts on its nodes.
HYPERPOD_HEALTH_LABEL = "sagemaker.amazonaws.com/node-health-status"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"


def ray_auth_secret_name(name_prefix: str) -> str:
    """The Secrets Manager secret holding the Ray clusters' auth token (constructs/ray_auth.py);
    workloads/common/security.py secrets_manager_secret_name is the same, checked by tests."""
    return f"{name_prefix}/ray-auth-token"
