"""Kubernetes names shared by the infrastructure (constructs/) and the Ray workloads (workloads/).

The EKS stack creates the namespace, the service account with its Pod Identity association, the
FSx claim and the `system` node group; the RayJob and RayServices refer to them. Both sides
import these, never retype them. Pure values: importable without aws_cdk or Ray.
"""

from __future__ import annotations

# Namespace and service account of the Ray workloads (RayJob, RayService).
WORKLOADS_NAMESPACE = "ray-workloads"
WORKLOADS_SERVICE_ACCOUNT = "ray-workloads"
# The ReadWriteMany claim bound to the FSx for Lustre file system, and where pods mount it.
FSX_PVC = "fsx-claim"
FSX_STORAGE_CLASS = "fsx-lustre-static"
FSX_MOUNT_PATH = "/fsx"
# The EKS managed node group for the KubeRay operator, Ray head pods and CoreDNS; EKS labels its
# nodes with the group's name.
SYSTEM_NODEGROUP = "system"
NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"
SYSTEM_NODE_SELECTOR = {NODEGROUP_LABEL: SYSTEM_NODEGROUP}
# Namespace AWS requires for HyperPod's agents and permissions (it "cannot be modified").
HYPERPOD_NAMESPACE = "aws-hyperpod"
# The KubeRay operator's namespace.
KUBERAY_NAMESPACE = "kuberay-system"
# Labels on every node (kubelet) and on HyperPod's nodes (HyperPod); only nodes HyperPod reports
# healthy are schedulable for Ray workers.
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
HYPERPOD_HEALTH_LABEL = "sagemaker.amazonaws.com/node-health-status"
HYPERPOD_HEALTHY = "Schedulable"
# HyperPod's own label with the instance group's name on each of its nodes.
HYPERPOD_INSTANCE_GROUP_LABEL = "sagemaker.amazonaws.com/instance-group-name"
# Extended resources the device plugins advertise.
GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"


# The Ray heads' own security group (constructs/ray_heads.py): its description, by which `hpray
# teardown` finds it (with the cluster stack's CloudFormation tag) to wait for the heads' branch
# interfaces. Changing it replaces the group.
RAY_HEADS_SECURITY_GROUP_DESCRIPTION = "Ray head pods (EKS security groups for pods): GCS store, workers, operator"


def ray_auth_secret_name(name_prefix: str) -> str:
    """The Secrets Manager secret holding the Ray clusters' auth token (constructs/ray_auth.py)."""
    return f"{name_prefix}/ray-auth-token"


def team_ray_auth_secret_name(name_prefix: str, team: str) -> str:
    """The Secrets Manager secret holding team ``team``'s own Ray token (constructs/team_access.py):
    the Ray clusters of the team's namespace authenticate with it, and only the team reads it."""
    return f"{name_prefix}/teams/{team}/ray-auth-token"


# GCS fault tolerance of the RayServices (constructs/gcs_store.py, manifests/inference.py):
# the ElastiCache for Valkey endpoint behind a Kubernetes ExternalName Service (the endpoint's
# host name is known only after deployment; the manifests name this Service), its TLS port, and
# the Kubernetes Secret the Secrets Store CSI driver syncs its AUTH token into.
GCS_STORE_SERVICE = "ray-gcs-store"
GCS_STORE_PORT = 6380
GCS_STORE_SECRET = "ray-gcs-store-auth"


def gcs_store_secret_name(name_prefix: str) -> str:
    """The Secrets Manager secret holding the GCS store's AUTH token (constructs/gcs_store.py)."""
    return f"{name_prefix}/ray-gcs-store-auth"


def stack_prefix(name_prefix: str) -> str:
    """The CDK stacks' name prefix of an environment: ``hpray-dev`` -> ``HprayDev``."""
    return "".join(part.capitalize() for part in name_prefix.split("-"))


# The Ray workloads the platform renders (manifests/registry.py). Their names, app labels and
# Serve port are facts here, so the NetworkPolicies, disruption budgets and the flow table read
# them without rendering a manifest.
SERVE_PORT = 8000
RAY_DASHBOARD_PORT = 8265
TRAINING_APP = "ray-train"
# The pretokenize RayJob (config's ``pretokenize:``): its name and its pods' app label.
PRETOKENIZE_JOB = "pretokenize"
PRETOKENIZE_APP = "ray-pretokenize"
INFERENCE_APP = "inference"
LLM_APP = "llm"
EXPORT_APP = "export"
BATCH_INFERENCE_APP = "batch-inference"
# The generation app's Serve deployment (serveConfigV2; the autoscaling check names it).
INFERENCE_DEPLOYMENT = "Generate"
# Pods of namespaces labelled ``SERVE_CLIENT_LABEL=true`` may call the RayServices' Serve port
# (manifests/network_policy.py): in-cluster clients, or an ingress controller placed there.
SERVE_CLIENT_LABEL = "hyperpod-ray/serve-client"
# Serve traffic goes to the worker pods' proxies only; the head (system nodes) stays control
# (a RayService's ``excludeHeadPodFromServeSvc``).
HEAD_IN_SERVE_SERVICE = False


def training_job_name(run_name: str) -> str:
    """The training RayJob of run ``run_name`` (config ``training.run_name``)."""
    return f"train-{run_name}"


def export_job_name(run_name: str) -> str:
    """The export RayJob of run ``run_name`` (its Hugging Face folder, ``training.export_path``)."""
    return f"export-{run_name}"


def batch_inference_job_name(name_prefix: str) -> str:
    """The batch inference RayJob (config ``batch_inference``)."""
    return f"{name_prefix}-{BATCH_INFERENCE_APP}"


def inference_service_name(name_prefix: str, app_name: str) -> str:
    """The generation RayService (config ``inference.app_name``)."""
    return f"{name_prefix}-{app_name}"


def llm_service_name(name_prefix: str) -> str:
    """The LLM RayService (config ``inference.llm``)."""
    return f"{name_prefix}-{LLM_APP}"


# The CDK bootstrap's default qualifier: it names the bootstrap roles and the assets repository
# (cdk-hnb659fds-lookup-role-ACCOUNT-REGION, cdk-hnb659fds-container-assets-ACCOUNT-REGION).
CDK_QUALIFIER = "hnb659fds"
