"""The `eks:` section: the EKS cluster and its `system` managed node group."""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from config import catalog, versions
from config.base import Frozen
from config.fields import cidr_block

IAM_PRINCIPAL_ARN_RE = re.compile(r"^arn:aws[a-z-]*:iam::[0-9]{12}:(role|user)/[\w+=,.@/-]{1,512}$")


class SystemNodeGroup(Frozen):
    """The EKS managed node group 'system': KubeRay operator, Ray head pods, CoreDNS."""

    # 4 vCPU / 16 GiB: room for CoreDNS, the KubeRay operator and two Ray head pods per node.
    instance_type: str = "m7i.xlarge"
    # Two nodes so that CoreDNS and the operator survive one node's loss.
    desired_size: int = Field(default=2, ge=1, le=100)
    min_size: int = Field(default=2, ge=1, le=100)
    max_size: int = Field(default=4, ge=1, le=100)
    # 100 GiB: Ray head images are several GiB; the EKS default of 20 GiB fills up.
    disk_size_gib: int = Field(default=100, ge=20, le=16384)

    @field_validator("instance_type")
    @classmethod
    def _instance_type(cls, v: str) -> str:
        return catalog.require_enum_value(v, service="ec2", shape="InstanceType", what="an EC2 instance type")

    @model_validator(mode="after")
    def _sizes(self) -> "SystemNodeGroup":
        if not self.min_size <= self.desired_size <= self.max_size:
            raise ValueError(
                f"eks.system_nodes sizes must satisfy min_size <= desired_size <= max_size; got "
                f"{self.min_size} <= {self.desired_size} <= {self.max_size}"
            )
        return self


class Eks(Frozen):
    # The newest version that HyperPod supports and this app pins add-ons for (config/versions.py).
    kubernetes_version: str = "1.33"
    # Private endpoint only unless an environment opts in (and then only from listed CIDRs).
    endpoint_public_access: bool = False
    public_access_cidrs: list[str] = Field(default_factory=list)
    admin_principal_arns: list[str] = Field(default_factory=list)
    system_nodes: SystemNodeGroup = Field(default_factory=SystemNodeGroup)
    # Off by default: the add-on runs an agent per node and ships metrics at a cost.
    cloudwatch_observability: bool = False
    kuberay_chart_version: str = versions.KUBERAY_OPERATOR.version
    # Instance types the NVIDIA device plugin and health monitoring agent may run on. Empty: the
    # GPU instance types of this environment's HyperPod groups (EnvironmentConfig derives them).
    # Listing more lets a group change type without a chart update first.
    gpu_device_plugin_instance_types: list[str] = Field(default_factory=list)

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
        for arn in v:
            if not IAM_PRINCIPAL_ARN_RE.match(arn):
                raise ValueError(
                    f"{arn!r} is not an IAM role or user ARN; expected "
                    "arn:aws:iam::123456789012:role/NAME"
                )
        return v

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
    def _endpoint(self) -> "Eks":
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
