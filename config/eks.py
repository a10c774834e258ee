"""The `eks:` section: the EKS cluster and its `system` managed node group."""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from config import catalog, versions
from config.base import Frozen
from config.fields import cidr_block, iam_principal_arns


class SystemNodeGroup(Frozen):
    """The EKS managed node group 'system': KubeRay operator, Ray head pods, CoreDNS."""

    instance_type: str = Field(
        default="m7i.xlarge",
        description="EC2 instance type (botocore's InstanceType enum); it runs CoreDNS, the KubeRay operator and Ray head pods.",
    )
    desired_size: int = Field(
        default=2,
        ge=1,
        le=100,
        description="Nodes at deploy; two so that CoreDNS and the operator survive one node's loss.",
    )
    min_size: int = Field(default=2, ge=1, le=100, description="Fewest nodes; min_size <= desired_size <= max_size.")
    max_size: int = Field(default=4, ge=1, le=100, description="Most nodes.")
    disk_size_gib: int = Field(
        default=100,
        ge=20,
        le=16384,
        description="Root volume per node, GiB; Ray images are several GiB and EKS's default 20 fills up.",
    )

    @field_validator("instance_type")
    @classmethod
    def _instance_type(cls, v: str) -> str:
        return catalog.require_enum_value(v, service="ec2", shape="InstanceType", what="an EC2 instance type")

    @model_validator(mode="after")
    def _sizes(self) -> SystemNodeGroup:
        if not self.min_size <= self.desired_size <= self.max_size:
            raise ValueError(
                f"eks.system_nodes sizes must satisfy min_size <= desired_size <= max_size; got "
                f"{self.min_size} <= {self.desired_size} <= {self.max_size}"
            )
        return self


class Eks(Frozen):
    """The EKS cluster HyperPod attaches to: version, endpoint, access, system nodes, add-ons."""

    kubernetes_version: str = Field(
        default=versions.newest_kubernetes_version(),
        description="Kubernetes minor version; one that HyperPod supports and config/versions.py pins add-ons and kubectl for.",
        json_schema_extra={"enum": list(versions.supported_kubernetes_versions())},
    )
    extended_support_acknowledged: bool = Field(
        default=False,
        description="Accept EKS extended support for kubernetes_version once it is past its end of standard support (config/versions.py EKS_CALENDAR): six times the per-cluster-hour price. Required in production then; elsewhere synth warns with the monthly extra cost. The cluster's upgrade policy is always EXTENDED: EKS never upgrades it by itself.",
    )
    endpoint_public_access: bool = Field(
        default=False,
        description="Also expose the API endpoint publicly (only to public_access_cidrs); the private endpoint is always on.",
    )
    public_access_cidrs: list[str] = Field(
        default_factory=list,
        description="CIDR blocks allowed to reach a public endpoint; required with it, 0.0.0.0/0 refused in production.",
    )
    admin_principal_arns: list[str] = Field(
        default_factory=list,
        description="IAM role or user ARNs that get an access entry with AmazonEKSClusterAdminPolicy.",
    )
    system_nodes: SystemNodeGroup = Field(
        default_factory=SystemNodeGroup, description="The 'system' managed node group."
    )
    ray_token_auth: bool = Field(
        default=True,
        description="Ray token authentication on every RayJob and RayService (KubeRay authOptions; the token from the Secrets Manager secret <name_prefix>/ray-auth-token, synced into a Kubernetes Secret by the Secrets Store CSI driver add-on, which this switch also installs). Off: Ray's dashboard and Jobs API accept any caller that reaches them.",
    )
    cloudwatch_observability: bool = Field(
        default=False,
        description="Install the CloudWatch Observability add-on (an agent per node; metrics cost money).",
    )
    kuberay_chart_version: str = Field(
        default=versions.KUBERAY_OPERATOR.version,
        description="KubeRay operator chart version, MAJOR.MINOR.PATCH, at least 1.2.0 (older operators do not recreate an evicted head).",
    )
    gpu_device_plugin_instance_types: list[str] = Field(
        default_factory=list,
        description="HyperPod GPU types the NVIDIA device plugin and health agent run on; empty: the GPU types of hyperpod.instance_groups. List more ahead of a type change.",
    )

    @field_validator("kubernetes_version")
    @classmethod
    def _version(cls, v: str) -> str:
        supported = versions.supported_kubernetes_versions()
        if v not in supported:
            raise ValueError(
                f"Kubernetes {v!r} is not supported; allowed: {', '.join(supported)} (HyperPod "
                f"supports {', '.join(versions.HYPERPOD_KUBERNETES_VERSIONS)}; add-ons and kubectl "
                "are pinned in config/versions.py only for the allowed ones)"
            )
        return v

    @field_validator("public_access_cidrs")
    @classmethod
    def _cidrs(cls, v: list[str]) -> list[str]:
        return [cidr_block(c) for c in v]

    @field_validator("admin_principal_arns")
    @classmethod
    def _arns(cls, v: list[str]) -> list[str]:
        return iam_principal_arns(v)

    @field_validator("kuberay_chart_version")
    @classmethod
    def _kuberay(cls, v: str) -> str:
        parsed = versions.semver(v)
        minimum = ".".join(str(p) for p in versions.KUBERAY_MINIMUM)
        if parsed is None or not re.match(r"^\d+\.\d+\.\d+$", v):
            raise ValueError(f"{v!r} is not a KubeRay release version; expected MAJOR.MINOR.PATCH, e.g. 1.7.0")
        if parsed < versions.KUBERAY_MINIMUM:
            raise ValueError(
                f"KubeRay chart {v} is older than {minimum}; before {minimum} the operator did not "
                f"recreate an evicted Ray head pod (allowed: >= {minimum}; pinned: "
                f"{versions.KUBERAY_OPERATOR.version})"
            )
        return v

    @field_validator("gpu_device_plugin_instance_types")
    @classmethod
    def _device_plugin_types(cls, v: list[str]) -> list[str]:
        gpu = catalog.gpu_instance_types()
        bad = [t for t in v if t not in gpu]
        if bad:
            raise ValueError(
                f"{', '.join(repr(t) for t in bad)} {'is not a GPU instance type' if len(bad) == 1 else 'are not GPU instance types'} "
                "of HyperPod; the NVIDIA device plugin crash-loops on nodes without NVIDIA GPUs "
                "(allowed: the GPU types in config/catalog.py, e.g. ml.g5.12xlarge, ml.p5.48xlarge)"
            )
        return list(dict.fromkeys(v))

    @model_validator(mode="after")
    def _endpoint(self) -> Eks:
        if self.endpoint_public_access and not self.public_access_cidrs:
            raise ValueError(
                "eks.public_access_cidrs: a public endpoint (eks.endpoint_public_access: true) needs "
                "the CIDR blocks allowed to reach it; none given (an empty list would open it to "
                "0.0.0.0/0)"
            )
        if not self.endpoint_public_access and self.public_access_cidrs:
            raise ValueError(
                "eks.public_access_cidrs: given while eks.endpoint_public_access is false; set the "
                "endpoint public or remove the CIDRs"
            )
        return self
