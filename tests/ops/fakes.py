"""Thin fakes at the boto3-client boundary for the calls moto 5.2.5 does not implement, and
realistic API payloads.

- Service Quotas: moto implements ListAWSDefaultServiceQuotas / GetServiceQuota for service code
  ``vpc`` only, and not ListServiceQuotas at all; the ``sagemaker`` quotas are stubbed.
- EKS DescribeClusterVersions and DescribeAddonVersions: not in moto; stubbed.

The stubs are botocore ``Stubber``s on the very client the CLI uses, so requests are checked
against the real service model (parameter names and types), and responses against its output
shape; every other call of the test still goes to moto.

One module because the fakes stand in at one boundary (the boto3 clients) and share the stubbed
clients and payloads.
"""

from __future__ import annotations

from typing import Any

import yaml
from botocore.stub import Stubber

from config.loader import CONFIG_DIR

# The dev environment's account: moto answers as this account (MOTO_ACCOUNT_ID, set in conftest).
ACCOUNT = "111111111111"
REGION = "us-east-1"


def quota(instance_type: str, value: float, code: str) -> dict[str, Any]:
    # QuotaCode values are placeholders in the L-XXXXXXXX format; the real codes differ per quota.
    name = f"{instance_type} for cluster usage"
    return {
        "ServiceCode": "sagemaker",
        "ServiceName": "Amazon SageMaker",
        "QuotaArn": f"arn:aws:servicequotas:{REGION}:{ACCOUNT}:sagemaker/{code}",
        "QuotaCode": code,
        "QuotaName": name,
        "Value": value,
        "Unit": "None",
        "Adjustable": True,
        "GlobalQuota": False,
    }


def stub_quotas(aws, *, applied: list[dict], defaults: list[dict], error: str | None = None) -> Stubber:
    stubber = Stubber(aws.client("service-quotas"))
    if error:
        stubber.add_client_error(
            "list_service_quotas",
            service_error_code=error,
            service_message={
                "AccessDeniedException": f"User: arn:aws:iam::{ACCOUNT}:user/ci is not authorized to perform: "
                "servicequotas:ListServiceQuotas",
                "TooManyRequestsException": "Rate exceeded",
            }.get(error, error),
            http_status_code={"AccessDeniedException": 400, "TooManyRequestsException": 400}.get(error, 400),
            expected_params={"ServiceCode": "sagemaker"},
        )
    else:
        stubber.add_response("list_service_quotas", {"Quotas": applied}, {"ServiceCode": "sagemaker"})
        stubber.add_response("list_aws_default_service_quotas", {"Quotas": defaults}, {"ServiceCode": "sagemaker"})
    stubber.activate()
    return stubber


def eks_version(version: str, status: str, patch: str) -> dict[str, Any]:
    return {
        "clusterVersion": version,
        "clusterType": "eks",
        "defaultPlatformVersion": "eks.10",
        "defaultVersion": False,
        "releaseDate": "2025-05-29T00:00:00Z",
        "endOfStandardSupportDate": "2026-07-29T00:00:00Z",
        "endOfExtendedSupportDate": "2027-07-29T00:00:00Z",
        "status": status.lower().replace("_", "-"),
        "versionStatus": status,
        "kubernetesPatchVersion": patch,
    }


DEFAULT_EKS_VERSIONS = [
    eks_version("1.31", "EXTENDED_SUPPORT", "1.31.13"),
    eks_version("1.32", "STANDARD_SUPPORT", "1.32.9"),
    eks_version("1.33", "STANDARD_SUPPORT", "1.33.5"),
    eks_version("1.34", "STANDARD_SUPPORT", "1.34.1"),
]


def addon_entry(name: str, builds: list[str], kubernetes_version: str, default: str | None = None) -> dict[str, Any]:
    """One add-on of a DescribeAddonVersions answer for ``kubernetes_version``, as EKS returns it."""
    return {
        "addonName": name,
        "type": "networking" if name in ("vpc-cni", "kube-proxy", "coredns") else "storage",
        "addonVersions": [
            {
                "addonVersion": build,
                "architecture": ["amd64", "arm64"],
                "computeTypes": ["ec2"],
                "compatibilities": [
                    {
                        "clusterVersion": kubernetes_version,
                        "platformVersions": ["*"],
                        "defaultVersion": build == (default or builds[0]),
                    }
                ],
                "requiresConfiguration": False,
                "requiresIamPermissions": name == "aws-fsx-csi-driver",
            }
            for build in builds
        ],
        "publisher": "eks",
        "owner": "aws",
    }


def pinned_addons(kubernetes_version: str = "1.34") -> list[dict[str, Any]]:
    """EKS offering every pinned build of config/versions.py for ``kubernetes_version`` (and, like
    the real answer, another add-on nobody pinned)."""
    from config.versions import ADDON_VERSIONS

    return [
        addon_entry(name, [build], kubernetes_version)
        for name, build in sorted(ADDON_VERSIONS[kubernetes_version].items())
    ] + [addon_entry("snapshot-controller", ["v8.3.0-eksbuild.1"], kubernetes_version)]


def stub_eks_versions(
    aws, versions: list[dict] | None = None, *, addons: list[dict] | None = None, addons_for: str = "1.34"
) -> Stubber:
    """DescribeClusterVersions, then DescribeAddonVersions for ``addons_for`` (default: every pin
    offered), in preflight's order."""
    stubber = Stubber(aws.client("eks"))
    stubber.add_response(
        "describe_cluster_versions",
        {"clusterVersions": DEFAULT_EKS_VERSIONS if versions is None else versions},
        {"clusterType": "eks", "includeAll": True},
    )
    stubber.add_response(
        "describe_addon_versions",
        {"addons": pinned_addons(addons_for) if addons is None else addons},
        {"kubernetesVersion": addons_for},
    )
    stubber.activate()
    return stubber


# The delivery pipeline's account (config/pipeline.yaml), which deploys dev, staging and prod.
PIPELINE_ACCOUNT = "444444444444"


def create_bootstrap_stack(
    version: int = 28, name: str = "CDKToolkit", trusted: tuple[str, ...] = (PIPELINE_ACCOUNT,)
) -> None:
    """A CDKToolkit stack in moto with the BootstrapVersion output and the TrustedAccounts
    parameter that `cdk bootstrap [--trust ACCOUNT]` creates."""
    import json

    import boto3

    template = {
        # CommaDelimitedList in the real bootstrap template, whose DescribeStacks shows the comma
        # string; moto would show a Python list's repr for that type, so String here.
        "Parameters": {"TrustedAccounts": {"Type": "String", "Default": ""}},
        "Resources": {
            "CdkBootstrapVersion": {
                "Type": "AWS::SSM::Parameter",
                "Properties": {"Type": "String", "Name": f"/cdk-bootstrap/{name}/version", "Value": str(version)},
            }
        },
        "Outputs": {"BootstrapVersion": {"Value": str(version)}},
    }
    boto3.client("cloudformation", region_name=REGION).create_stack(
        StackName=name,
        TemplateBody=json.dumps(template),
        Parameters=[{"ParameterKey": "TrustedAccounts", "ParameterValue": ",".join(trusted)}],
    )


def env_data(name: str = "dev") -> dict[str, Any]:
    data = yaml.safe_load((CONFIG_DIR / f"{name}.yaml").read_text())
    data.setdefault("name", name)
    return data


# moto's us-east-1 maps us-east-1a -> use1-az6, us-east-1b -> use1-az1, us-east-1d -> use1-az4
# (as a real account would, with its own mapping). The dev config pins use1-az4 and use1-az6 by ID;
# this is dev with the names this "account" gives those IDs.
def healthy_data() -> dict[str, Any]:
    data = env_data("dev")
    data["network"]["availability_zones"] = [
        {"name": "us-east-1d", "id": "use1-az4"},
        {"name": "us-east-1a", "id": "use1-az6"},
    ]
    return data


# ---------------------------------------------------------------------------------------------
# Realistic Kubernetes objects (JSON as the API server returns them, `kubectl get -o json`)
# ---------------------------------------------------------------------------------------------


def hyperpod_node(
    instance_id: str,
    *,
    group: str = "gpu-workers",
    health: str = "Schedulable",
    deep: str = "Passed",
    ready: bool = True,
    faults: dict[str, str] | None = None,
    zone: str = "us-east-1d",
) -> dict[str, Any]:
    name = f"hyperpod-{instance_id}"
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/instance-type": "ml.g5.12xlarge",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "ml.g5.12xlarge",
        "sagemaker.amazonaws.com/cluster-name": "hpray-dev-hyperpod",
        "sagemaker.amazonaws.com/compute-type": "hyperpod",
        "sagemaker.amazonaws.com/instance-group-name": group,
        "sagemaker.amazonaws.com/node-health-status": health,
        "sagemaker.amazonaws.com/deep-health-check-status": deep,
        "topology.kubernetes.io/region": "us-east-1",
        "topology.kubernetes.io/zone": zone,
        "workload": "ray-gpu",
    }
    for k, v in (faults or {}).items():
        labels[f"sagemaker.amazonaws.com/fault-{k}"] = v
    spec: dict[str, Any] = {"providerID": f"aws:///{zone}/{instance_id}"}
    if health != "Schedulable":
        spec["taints"] = [
            {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule", "timeAdded": "2026-12-02T11:40:12Z"}
        ]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"uid-{instance_id}",
            "resourceVersion": "918273",
            "creationTimestamp": "2026-12-01T08:03:11Z",
            "labels": labels,
        },
        "spec": spec,
        "status": {
            "capacity": {
                "cpu": "48",
                "memory": "195784236Ki",
                "nvidia.com/gpu": "4",
                "vpc.amazonaws.com/efa": "1",
                "pods": "250",
            },
            "allocatable": {
                "cpu": "47810m",
                "memory": "190467116Ki",
                "nvidia.com/gpu": "4",
                "vpc.amazonaws.com/efa": "1",
                "pods": "250",
            },
            "conditions": [
                {
                    "type": "MemoryPressure",
                    "status": "False",
                    "reason": "KubeletHasSufficientMemory",
                    "lastHeartbeatTime": "2026-12-02T11:59:40Z",
                    "lastTransitionTime": "2026-12-01T08:03:11Z",
                },
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "KubeletReady" if ready else "KubeletNotReady",
                    "message": "kubelet is posting ready status" if ready else "container runtime network not ready",
                    "lastHeartbeatTime": "2026-12-02T11:59:40Z",
                    "lastTransitionTime": "2026-12-01T08:05:02Z",
                },
            ],
            "nodeInfo": {
                "kubeletVersion": "v1.33.5-eks-1a2b3c4",
                "containerRuntimeVersion": "containerd://1.7.27",
                "osImage": "Amazon Linux 2023",
            },
        },
    }


def system_node(name: str = "ip-10-10-130-21.ec2.internal") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"eks.amazonaws.com/nodegroup": "system", "node.kubernetes.io/instance-type": "m7i.xlarge"},
        },
        "spec": {"providerID": "aws:///us-east-1d/i-0fffeeeddd0001111"},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]},
    }


def operator_deployment(ready: int = 1, replicas: int = 1) -> dict[str, Any]:
    available = ready >= replicas
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "kuberay-operator",
            "namespace": "kuberay-system",
            "labels": {
                "app.kubernetes.io/name": "kuberay-operator",
                "app.kubernetes.io/instance": "kuberay-operator",
                "app.kubernetes.io/managed-by": "Helm",
                "helm.sh/chart": "kuberay-operator-1.7.0",
            },
            "generation": 1,
        },
        "spec": {
            "replicas": replicas,
            "selector": {
                "matchLabels": {
                    "app.kubernetes.io/name": "kuberay-operator",
                    "app.kubernetes.io/instance": "kuberay-operator",
                }
            },
            "template": {
                "spec": {"containers": [{"name": "kuberay-operator", "image": "quay.io/kuberay/operator:v1.7.0"}]}
            },
        },
        "status": {
            "observedGeneration": 1,
            "replicas": replicas,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "conditions": [
                {
                    "type": "Available",
                    "status": "True" if available else "False",
                    "reason": "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
                    "message": "Deployment has minimum availability."
                    if available
                    else "Deployment does not have minimum availability.",
                },
                {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"},
            ],
        },
    }


RAYJOB_NAME = "hpray-dev-train"


def rayjob(stage: str, *, name: str = RAYJOB_NAME, namespace: str = "ray-workloads") -> dict[str, Any]:
    """A RayJob at one point of its life, with the status fields KubeRay v1.7 sets."""
    obj: dict[str, Any] = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": "5c1d2e3f-0000-4a4b-9c9d-000000000001",
            "resourceVersion": "1001",
            "generation": 1,
            "creationTimestamp": "2026-12-02T12:00:00Z",
        },
        "spec": {
            "entrypoint": "python -m workloads.training",
            "submissionMode": "HTTPMode",
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": 600,
            "backoffLimit": 2,
        },
    }
    cluster = f"{name}-x7k2p"
    statuses = {
        "new": None,
        "initializing": {
            "jobDeploymentStatus": "Initializing",
            "rayClusterName": cluster,
            "startTime": "2026-12-02T12:00:01Z",
            "observedGeneration": 1,
        },
        "running": {
            "jobDeploymentStatus": "Running",
            "jobStatus": "RUNNING",
            "jobId": f"{name}-9vq4s",
            "rayClusterName": cluster,
            "dashboardURL": f"{cluster}-head-svc.{namespace}.svc.cluster.local:8265",
            "startTime": "2026-12-02T12:00:01Z",
            "observedGeneration": 1,
        },
        "retrying": {
            "jobDeploymentStatus": "Retrying",
            "jobStatus": "FAILED",
            "failed": 1,
            "reason": "AppFailed",
            "message": "Job entrypoint command failed with exit code 1",
            "jobId": f"{name}-9vq4s",
            "rayClusterName": cluster,
            "startTime": "2026-12-02T12:00:01Z",
        },
        "running-again": {
            "jobDeploymentStatus": "Running",
            "jobStatus": "RUNNING",
            "failed": 1,
            "jobId": f"{name}-b2m8d",
            "rayClusterName": f"{name}-q3w9z",
            "startTime": "2026-12-02T12:09:30Z",
        },
        "complete": {
            "jobDeploymentStatus": "Complete",
            "jobStatus": "SUCCEEDED",
            "failed": 1,
            "succeeded": 1,
            "jobId": f"{name}-b2m8d",
            "rayClusterName": f"{name}-q3w9z",
            "startTime": "2026-12-02T12:09:30Z",
            "endTime": "2026-12-02T12:41:07Z",
        },
        "failed": {
            "jobDeploymentStatus": "Failed",
            "jobStatus": "FAILED",
            "failed": 3,
            "reason": "AppFailed",
            "message": "Job entrypoint command failed with exit code 1",
            "jobId": f"{name}-9vq4s",
            "rayClusterName": cluster,
            "startTime": "2026-12-02T12:00:01Z",
            "endTime": "2026-12-02T12:30:00Z",
        },
    }
    if statuses[stage] is not None:
        obj["status"] = statuses[stage]
    return obj


def rayservice(ready: bool, *, name: str = "hpray-dev-serve", namespace: str = "ray-workloads") -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": "2002", "generation": 1},
        "spec": {"serveConfigV2": "applications: []"},
        "status": {
            "serviceStatus": "Running" if ready else "",
            "numServeEndpoints": 2 if ready else 0,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "NonZeroServeEndpoints" if ready else "Initializing",
                    "lastTransitionTime": "2026-12-02T12:05:00Z",
                },
                {"type": "UpgradeInProgress", "status": "False", "reason": "NoPendingCluster"},
            ],
            "activeServiceStatus": {
                "rayClusterName": f"{name}-raycluster-abcde",
                "applicationStatuses": {
                    "llm": {
                        "status": "RUNNING" if ready else "DEPLOYING",
                        "serveDeploymentStatuses": {"LLMServer": {"status": "HEALTHY" if ready else "UPDATING"}},
                    }
                },
            },
        },
    }


def submitter_pod(
    name: str = RAYJOB_NAME,
    suffix: str = "h5x2l",
    phase: str = "Running",
    created: str = "2026-12-02T12:00:40Z",
    namespace: str = "ray-workloads",
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-{suffix}",
            "namespace": namespace,
            "creationTimestamp": created,
            "labels": {
                "batch.kubernetes.io/job-name": name,
                "job-name": name,
                "batch.kubernetes.io/controller-uid": "c0ffee",
            },
        },
        "status": {"phase": phase},
    }


def head_pod(
    cluster: str, *, namespace: str = "ray-workloads", phase: str = "Running", token_secret: str | None = None
) -> dict[str, Any]:
    """A Ray head pod as KubeRay 1.7 creates it (labels, the Ray container first; with
    ``token_secret`` the env KubeRay injects for token authentication)."""
    env: list[dict[str, Any]] = [{"name": "RAY_CLUSTER_NAME", "value": cluster}]
    if token_secret:
        env += [
            {"name": "RAY_AUTH_MODE", "value": "token"},
            {"name": "RAY_AUTH_TOKEN", "valueFrom": {"secretKeyRef": {"name": token_secret, "key": "auth_token"}}},
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{cluster}-head-8xk2q",
            "namespace": namespace,
            "creationTimestamp": "2026-12-02T12:00:05Z",
            "labels": {"ray.io/cluster": cluster, "ray.io/node-type": "head", "ray.io/is-ray-node": "yes"},
        },
        "spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.60.0", "env": env}]},
        "status": {"phase": phase},
    }


_BOTOCORE_SESSION = None


def shared_aws(region: str = REGION):
    """An ops.clients.aws.Aws whose boto3 session shares one botocore session across tests, so the large
    service models (EC2, SageMaker) are parsed once per test run instead of once per test. Clients
    (and so their stubs) are still new for every Aws."""
    global _BOTOCORE_SESSION
    import boto3
    import botocore.session

    from ops.clients.aws import Aws

    if _BOTOCORE_SESSION is None:
        _BOTOCORE_SESSION = botocore.session.get_session()
    return Aws(region, session=boto3.Session(botocore_session=_BOTOCORE_SESSION, region_name=region))
