"""The typed, frozen model of one environment's configuration: the public import path.

The sections live in one module each (config/network.py, eks.py, hyperpod.py, storage.py,
tags.py, training.py, inference.py, placement.py) and the whole environment with its
cross-section rules in config/environment.py; this module re-exports them so that
``from config.model import EnvironmentConfig, Eks, ...`` keeps working.
"""

from __future__ import annotations

<<<<<<< HEAD
from config.eks import IAM_PRINCIPAL_ARN_RE, Eks, SystemNodeGroup
from config.environment import CROSS_CHECKS, EnvironmentConfig
from config.fields import (
    ACCOUNT_RE,
    AZ_ID_RE,
    PREFIX_RE,
    REGION_RE,
    AccountId,
    AzId,
    RegionName,
    k8s_key_problem,
    k8s_value_problem,
)
from config.hyperpod import (
    DEEP_HEALTH_CHECKS,
    MAX_INSTANCE_GROUPS,
    MAX_INSTANCES_PER_GROUP,
    HyperPod,
    InstanceGroup,
    Taint,
)
=======
import ipaddress
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, ConfigDict, Field, field_validator, model_validator

from config import catalog, versions
from config.base import Frozen
>>>>>>> tooling
from config.inference import Inference
from config.network import AvailabilityZone, HyperPodSubnet, Network
from config.storage import Fsx, Storage
from config.tags import REQUIRED_TAGS, Tags
from config.training import Training

<<<<<<< HEAD
__all__ = [
    "ACCOUNT_RE", "AZ_ID_RE", "CROSS_CHECKS", "DEEP_HEALTH_CHECKS", "IAM_PRINCIPAL_ARN_RE",
    "MAX_INSTANCES_PER_GROUP", "MAX_INSTANCE_GROUPS", "PREFIX_RE", "REGION_RE", "REQUIRED_TAGS",
    "AccountId", "AvailabilityZone", "AzId", "Eks", "EnvironmentConfig", "Fsx", "HyperPod",
    "HyperPodSubnet", "Inference", "InstanceGroup", "Network", "RegionName", "Storage",
    "SystemNodeGroup", "Tags", "Taint", "Training", "k8s_key_problem", "k8s_value_problem",
]
=======
# ---------------------------------------------------------------------------------------------
# Shared building blocks
# ---------------------------------------------------------------------------------------------


def _cidr(value: str) -> str:
    try:
        net = ipaddress.IPv4Network(value, strict=True)
    except (ipaddress.AddressValueError, ipaddress.NetmaskValueError, ValueError) as err:
        raise ValueError(
            f"{value!r} is not a valid IPv4 CIDR block ({err}); expected network/prefix, "
            "e.g. 10.0.0.0/16, with no host bits set"
        ) from None
    return str(net)


Cidr = Annotated[str, Field(description="IPv4 CIDR block, e.g. 10.0.0.0/16")]

AZ_ID_RE = re.compile(r"^[a-z]{2,4}[0-9]-az[0-9]{1,2}$")
ACCOUNT_RE = re.compile(r"^[0-9]{12}$")
REGION_RE = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-[0-9]$")
PREFIX_RE = re.compile(r"^[a-z][a-z0-9-]{1,22}[a-z0-9]$")


def _check(pattern: re.Pattern, what: str):
    def check(v: str) -> str:
        if not pattern.match(v):
            raise ValueError(f"{v!r} is not {what}")
        return v

    return AfterValidator(check)


# Field types shared by every model that holds such a value (one rule, one message).
AzId = Annotated[str, _check(AZ_ID_RE, "an AZ ID; expected the form use1-az4")]
AccountId = Annotated[str, _check(ACCOUNT_RE, "an AWS account ID; expected 12 digits (quote it in YAML)")]
RegionName = Annotated[str, _check(REGION_RE, "an AWS region name; expected e.g. us-east-1")]

# Kubernetes label keys: optional DNS-subdomain prefix (<=253) + '/' + name (<=63).
_K8S_NAME_RE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")
_DNS_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_K8S_VALUE_RE = re.compile(r"^(([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?)$")


def k8s_key_problem(key: str) -> str | None:
    """Why ``key`` is not a valid Kubernetes label/taint key, or None when it is."""
    prefix, _, name = key.rpartition("/")
    if "/" in key and not prefix:
        return "the prefix before '/' is empty"
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN_RE.match(prefix)):
        return "the prefix must be a DNS subdomain (lowercase alphanumerics, '-', '.'; <= 253 chars)"
    if not name or len(name) > 63 or not _K8S_NAME_RE.match(name):
        return (
            "the name must be 1-63 characters, alphanumerics, '-', '_' or '.', "
            "starting and ending with an alphanumeric"
        )
    return None


def k8s_value_problem(value: str) -> str | None:
    if len(value) > 63 or not _K8S_VALUE_RE.match(value):
        return (
            "a value must be at most 63 characters, alphanumerics, '-', '_' or '.', "
            "starting and ending with an alphanumeric (or empty)"
        )
    return None


# ---------------------------------------------------------------------------------------------
# Tags
# ---------------------------------------------------------------------------------------------

REQUIRED_TAGS = ("Project", "Environment", "Owner", "CostCenter")


class Tags(Frozen):
    """Cost-allocation tags applied to every resource."""

    project: str = Field(alias="Project")
    environment: str = Field(alias="Environment")
    owner: str | None = Field(default=None, alias="Owner")
    cost_center: str | None = Field(default=None, alias="CostCenter")
    extra: dict[str, str] = Field(default_factory=dict, alias="Extra")

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    def as_dict(self) -> dict[str, str]:
        tags = {"Project": self.project, "Environment": self.environment}
        if self.owner:
            tags["Owner"] = self.owner
        if self.cost_center:
            tags["CostCenter"] = self.cost_center
        tags.update(self.extra)
        return dict(sorted(tags.items()))


# ---------------------------------------------------------------------------------------------
# Network
# ---------------------------------------------------------------------------------------------


class AvailabilityZone(Frozen):
    """An AZ by name and by ID. Names map to IDs differently in each account; IDs do not."""

    name: str
    id: AzId


class HyperPodSubnet(Frozen):
    """One HyperPod subnet, pinned by AZ ID, inside a HyperPod secondary CIDR block."""

    az_id: AzId
    cidr: str

    _check_cidr = field_validator("cidr")(classmethod(lambda cls, v: _cidr(v)))


class Network(Frozen):
    vpc_cidr: str
    # /24 public subnets: they hold only NAT gateways and load balancers.
    public_subnet_mask: int = Field(default=24, ge=16, le=28)
    # /20 private subnets: EKS pods take VPC IPs (vpc-cni), 4091 addresses per AZ.
    private_subnet_mask: int = Field(default=20, ge=16, le=28)
    availability_zones: list[AvailabilityZone] = Field(min_length=2)
    # None: one NAT gateway in non-production, one per AZ in production.
    nat_gateways: int | None = Field(default=None, ge=0)
    hyperpod_cidr_blocks: list[str] = Field(min_length=1, max_length=4)
    hyperpod_subnets: list[HyperPodSubnet] = Field(min_length=1)
    # Closed network: interface endpoints for every AWS API the nodes call.
    closed_network: bool = False
    flow_log_retention_days: int = 90

    _check_vpc = field_validator("vpc_cidr")(classmethod(lambda cls, v: _cidr(v)))

    @field_validator("hyperpod_cidr_blocks")
    @classmethod
    def _blocks(cls, v: list[str]) -> list[str]:
        return [_cidr(c) for c in v]

    @field_validator("flow_log_retention_days")
    @classmethod
    def _retention(cls, v: int) -> int:
        if v not in catalog.LOG_RETENTION_DAYS:
            raise ValueError(
                f"{v} is not a CloudWatch Logs retention period; allowed: "
                + ", ".join(str(d) for d in catalog.LOG_RETENTION_DAYS)
            )
        return v

    @model_validator(mode="after")
    def _layout(self) -> Network:
        errors: list[str] = []
        vpc = ipaddress.IPv4Network(self.vpc_cidr)
        blocks = [ipaddress.IPv4Network(b) for b in self.hyperpod_cidr_blocks]
        named = [("network.vpc_cidr", vpc)] + [
            (f"network.hyperpod_cidr_blocks[{i}]", b) for i, b in enumerate(blocks)
        ]
        for i, (na, a) in enumerate(named):
            for nb, b in named[i + 1 :]:
                if a.overlaps(b):
                    errors.append(f"{na} {a} overlaps {nb} {b}; CIDR blocks of one VPC must not overlap")
        if self.public_subnet_mask < vpc.prefixlen or self.private_subnet_mask < vpc.prefixlen:
            errors.append(
                f"network subnet masks (/{self.public_subnet_mask}, /{self.private_subnet_mask}) "
                f"must be at least the VPC prefix /{vpc.prefixlen}"
            )
        else:
            needed = len(self.availability_zones) * (
                2 ** (32 - self.public_subnet_mask) + 2 ** (32 - self.private_subnet_mask)
            )
            if needed > vpc.num_addresses:
                errors.append(
                    f"network.vpc_cidr {vpc} has {vpc.num_addresses} addresses but "
                    f"{len(self.availability_zones)} AZs of /{self.public_subnet_mask} public and "
                    f"/{self.private_subnet_mask} private subnets need {needed}"
                )
        az_ids = [z.id for z in self.availability_zones]
        if len(set(az_ids)) != len(az_ids):
            errors.append(f"network.availability_zones has a repeated AZ ID: {az_ids}")
        seen: list[tuple[str, ipaddress.IPv4Network]] = []
        for i, s in enumerate(self.hyperpod_subnets):
            net = ipaddress.IPv4Network(s.cidr)
            field = f"network.hyperpod_subnets[{i}].cidr"
            if not any(net.subnet_of(b) for b in blocks):
                errors.append(
                    f"{field} {net} is not inside any of network.hyperpod_cidr_blocks "
                    f"({', '.join(self.hyperpod_cidr_blocks)})"
                )
            for other_field, other in seen:
                if net.overlaps(other):
                    errors.append(f"{field} {net} overlaps {other_field} {other}")
            seen.append((field, net))
        hp_ids = [s.az_id for s in self.hyperpod_subnets]
        if len(set(hp_ids)) != len(hp_ids):
            errors.append(f"network.hyperpod_subnets must have one subnet per AZ ID; got {hp_ids}")
        if errors:
            raise ValueError("\n".join(errors))
        return self

    def nat_gateway_count(self, *, production: bool) -> int:
        if self.nat_gateways is not None:
            return self.nat_gateways
        return len(self.availability_zones) if production else 1


# ---------------------------------------------------------------------------------------------
# EKS
# ---------------------------------------------------------------------------------------------

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
    def _sizes(self) -> SystemNodeGroup:
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
        return [_cidr(c) for c in v]

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


# ---------------------------------------------------------------------------------------------
# HyperPod
# ---------------------------------------------------------------------------------------------

DEEP_HEALTH_CHECKS = ("InstanceStress", "InstanceConnectivity")
# AWS::SageMaker::Cluster schema: InstanceCount 0-6758, VolumeSizeInGB 1-16384.
MAX_INSTANCES_PER_GROUP = 6758
EBS_VOLUME_GIB_MIN, EBS_VOLUME_GIB_MAX = 1, 16384
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
GROUP_NAME_RE = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")


class Taint(Frozen):
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]

    @field_validator("key")
    @classmethod
    def _key(cls, v: str) -> str:
        problem = k8s_key_problem(v)
        if problem:
            raise ValueError(f"taint key {v!r} is not a valid Kubernetes key: {problem}")
        return v

    @field_validator("value")
    @classmethod
    def _value(cls, v: str) -> str:
        problem = k8s_value_problem(v)
        if problem:
            raise ValueError(f"taint value {v!r} is not valid: {problem}")
        return v


class InstanceGroup(Frozen):
    name: str
    instance_type: str
    # 0 is allowed: a group can be kept in the cluster with no nodes (e.g. while capacity waits).
    instance_count: int = Field(ge=0, le=MAX_INSTANCES_PER_GROUP)
    # 1: multithreading off, the usual choice for GPU training (one thread per physical core).
    threads_per_core: int = 1
    # 500 GiB: room for containerd images and kubelet state, which the lifecycle scripts move
    # onto this volume (/opt/sagemaker); a few large training images fit with space to spare.
    ebs_volume_gib: int = 500
    # None: the default for the instance type (see effective_deep_health_checks); [] turns them off.
    deep_health_checks: list[Literal["InstanceStress", "InstanceConnectivity"]] | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)
    subnet_az_id: AzId | None = None
    training_plan_arn: str | None = None

    @field_validator("threads_per_core")
    @classmethod
    def _threads(cls, v: int) -> int:
        if v not in (1, 2):
            raise ValueError(
                f"{v} threads per core is not allowed; allowed: 1 (multithreading off) or 2 (on)"
            )
        return v

    @field_validator("ebs_volume_gib")
    @classmethod
    def _ebs(cls, v: int) -> int:
        if not EBS_VOLUME_GIB_MIN <= v <= EBS_VOLUME_GIB_MAX:
            raise ValueError(
                f"{v} GiB is outside the HyperPod EBS volume size range; allowed: "
                f"{EBS_VOLUME_GIB_MIN}-{EBS_VOLUME_GIB_MAX} GiB"
            )
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not GROUP_NAME_RE.match(v):
            raise ValueError(
                f"{v!r} is not a HyperPod instance group name; allowed: 1-63 alphanumerics "
                "and hyphens, starting and ending with an alphanumeric"
            )
        return v

    @field_validator("instance_type")
    @classmethod
    def _instance_type(cls, v: str) -> str:
        return catalog.require_enum_value(
            v, service="sagemaker", shape="ClusterInstanceType", what="a HyperPod instance type"
        )

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            problem = k8s_key_problem(key)
            if problem:
                raise ValueError(f"label key {key!r} is not a valid Kubernetes key: {problem}")
            problem = k8s_value_problem(value)
            if problem:
                raise ValueError(f"label {key}={value!r} has an invalid value: {problem}")
        return v

    @field_validator("training_plan_arn")
    @classmethod
    def _plan(cls, v: str | None) -> str | None:
        if v is not None and not re.match(
            r"^arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:[0-9]{12}:training-plan/[a-zA-Z0-9-]+$", v
        ):
            raise ValueError(
                f"{v!r} is not a SageMaker training plan ARN; expected "
                "arn:aws:sagemaker:REGION:ACCOUNT:training-plan/NAME"
            )
        return v

    @model_validator(mode="after")
    def _health_checks(self) -> InstanceGroup:
        if self.deep_health_checks and not (self.is_gpu or self.is_trainium):
            raise ValueError(
                f"deep_health_checks {self.deep_health_checks} need a GPU or Trainium instance "
                f"type; {self.instance_type} has neither (use [] or leave it unset)"
            )
        return self

    @property
    def is_gpu(self) -> bool:
        # Membership, not instance_spec(): every ClusterInstanceType value must work here, including
        # CPU families the catalog has no hardware facts for.
        return self.instance_type in catalog.gpu_instance_types()

    @property
    def is_trainium(self) -> bool:
        return self.instance_type.startswith(("ml.trn1", "ml.trn2"))

    @property
    def has_efa(self) -> bool:
        return self.instance_type in catalog.efa_instance_types()

    @property
    def effective_deep_health_checks(self) -> list[str]:
        """Configured checks, or the default: on GPU (and Trainium) groups, InstanceStress, plus
        InstanceConnectivity where the type has EFA (its tests run over the EFA devices)."""
        if self.deep_health_checks is not None:
            return list(self.deep_health_checks)
        if not (self.is_gpu or self.is_trainium):
            return []
        return ["InstanceStress", "InstanceConnectivity"] if self.has_efa else ["InstanceStress"]


MAX_INSTANCE_GROUPS = 100


class HyperPod(Frozen):
    # Automatic: HyperPod reboots or replaces a node that fails its health checks.
    node_recovery: Literal["Automatic", "None"] = "Automatic"
    # Continuous (EKS orchestrator only): scaling requests per group run in parallel and failed
    # launches are retried instead of failing the whole update. None keeps the older standard mode.
    node_provisioning_mode: Literal["Continuous"] | None = "Continuous"
    instance_groups: list[InstanceGroup] = Field(min_length=1)

    @field_validator("instance_groups")
    @classmethod
    def _groups(cls, v: list[InstanceGroup]) -> list[InstanceGroup]:
        if len(v) > MAX_INSTANCE_GROUPS:
            raise ValueError(
                f"{len(v)} instance groups given; a HyperPod cluster allows at most "
                f"{MAX_INSTANCE_GROUPS}"
            )
        names = [g.name for g in v]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"instance group names must be unique; repeated: {', '.join(dupes)}")
        return v

    def group(self, name: str) -> InstanceGroup:
        for g in self.instance_groups:
            if g.name == name:
                return g
        raise KeyError(
            f"no HyperPod instance group named {name!r}; known: "
            + ", ".join(g.name for g in self.instance_groups)
        )


# ---------------------------------------------------------------------------------------------
# FSx for Lustre
# ---------------------------------------------------------------------------------------------


class Fsx(Frozen):
    deployment_type: Literal["PERSISTENT_2"] = "PERSISTENT_2"
    storage_capacity_gib: int = 1200
    throughput_mb_s_per_tib: int = 125
    data_compression: Literal["LZ4", "NONE"] = "LZ4"
    # Directory in the file system linked to the checkpoint bucket by a data repository association.
    file_system_path: str = "/checkpoints"
    # Prefix in the checkpoint bucket that the association imports from and exports to.
    import_export_prefix: str = "checkpoints/"

    @field_validator("storage_capacity_gib")
    @classmethod
    def _capacity(cls, v: int) -> int:
        # PERSISTENT_2: 1200 GiB, 2400 GiB, then increments of 2400 GiB (AWS FSx for Lustre docs).
        if v < 1200 or (v != 1200 and v % 2400 != 0):
            raise ValueError(
                f"{v} GiB is not a PERSISTENT_2 storage capacity; allowed: 1200, 2400, then "
                "multiples of 2400 GiB"
            )
        return v

    @field_validator("throughput_mb_s_per_tib")
    @classmethod
    def _throughput(cls, v: int) -> int:
        if v not in catalog.FSX_PERSISTENT_2_THROUGHPUT:
            raise ValueError(
                f"{v} MB/s/TiB is not a PERSISTENT_2 per-unit storage throughput; allowed: "
                + ", ".join(str(t) for t in catalog.FSX_PERSISTENT_2_THROUGHPUT)
            )
        return v

    @field_validator("file_system_path")
    @classmethod
    def _path(cls, v: str) -> str:
        if not re.match(r"^/[A-Za-z0-9_./-]{1,4095}$", v) or v == "/":
            raise ValueError(f"{v!r} is not a file system path; expected an absolute path like /checkpoints")
        return v

    @field_validator("import_export_prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        if not re.match(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*/$", v):
            raise ValueError(f"{v!r} is not an S3 prefix; expected a relative path ending in '/', e.g. checkpoints/")
        return v


# ---------------------------------------------------------------------------------------------
# Storage
# ---------------------------------------------------------------------------------------------


class Storage(Frozen):
    # Non-current checkpoint versions are kept this long so an overwritten checkpoint can be recovered.
    checkpoint_noncurrent_version_expiration_days: int = Field(default=30, ge=1, le=3650)
    # Incomplete multipart uploads from killed workers are aborted after this many days.
    abort_incomplete_multipart_upload_days: int = Field(default=7, ge=1, le=365)


# ---------------------------------------------------------------------------------------------
# The environment
# ---------------------------------------------------------------------------------------------


class EnvironmentConfig(Frozen):
    name: str
    account: AccountId
    region: RegionName
    name_prefix: str
    production: bool = False
    tags: Tags
    network: Network
    eks: Eks = Field(default_factory=Eks)
    hyperpod: HyperPod
    fsx: Fsx = Field(default_factory=Fsx)
    storage: Storage = Field(default_factory=Storage)
    training: Training = Field(default_factory=Training)
    inference: Inference = Field(default_factory=Inference)

    @field_validator("name_prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        if not PREFIX_RE.match(v):
            raise ValueError(
                f"{v!r} is not a valid name prefix; allowed: 3-24 lowercase letters, digits and "
                "hyphens, starting with a letter"
            )
        return v

    @model_validator(mode="after")
    def _cross(self) -> EnvironmentConfig:
        errors: list[str] = []
        if self.production:
            missing = [t for t in REQUIRED_TAGS if not self.tags.as_dict().get(t)]
            if missing:
                errors.append(f"tags: production environments require {', '.join(missing)}")
        for name in self.bucket_names().values():
            if len(name) > 63:
                errors.append(
                    f"name_prefix: generated bucket name {name!r} is {len(name)} characters; "
                    "S3 allows at most 63 (shorten name_prefix)"
                )
        for z in self.network.availability_zones:
            if not z.name.startswith(self.region):
                errors.append(
                    f"network.availability_zones: {z.name!r} is not an AZ of region {self.region}"
                )
        hp_az_ids = {s.az_id for s in self.network.hyperpod_subnets}
        for i, g in enumerate(self.hyperpod.instance_groups):
            if g.subnet_az_id is not None and g.subnet_az_id not in hp_az_ids:
                errors.append(
                    f"hyperpod.instance_groups[{i}].subnet_az_id: {g.subnet_az_id!r} has no HyperPod "
                    f"subnet; configured AZ IDs: {', '.join(sorted(hp_az_ids))}"
                )
        errors.extend(self._eks_errors())
        # The inference services must fit their instance groups (config/inference.py).
        errors.extend(self.inference.check_against(self))
        if errors:
            raise ValueError("\n".join(errors))
        return self

    def _eks_errors(self) -> list[str]:
        """Rules that tie the EKS section to the rest of the environment."""
        errors: list[str] = []
        if self.production:
            for cidr in self.eks.public_access_cidrs:
                if cidr.endswith("/0"):
                    errors.append(
                        f"eks.public_access_cidrs: {cidr} opens the production EKS endpoint to the "
                        "whole internet; list the operators' CIDR blocks instead"
                    )
        if self.region not in versions.HEALTH_MONITORING_AGENT_REGISTRIES:
            errors.append(
                f"region: AWS publishes the HyperPod health monitoring agent image in "
                f"{', '.join(sorted(versions.HEALTH_MONITORING_AGENT_REGISTRIES))}, not in {self.region}"
            )
        return errors

    # Derived EKS values ---------------------------------------------------------------------

    def gpu_device_plugin_instance_types(self) -> list[str]:
        """Instance types the NVIDIA device plugin and the health monitoring agent run on: the
        explicit list from config, else the GPU types of this environment's HyperPod groups."""
        if self.eks.gpu_device_plugin_instance_types:
            return sorted(self.eks.gpu_device_plugin_instance_types)
        return sorted({g.instance_type for g in self.hyperpod.instance_groups if g.is_gpu})

    def efa_device_plugin_instance_types(self) -> list[str]:
        """Instance types with EFA among this environment's HyperPod groups (and the GPU list)."""
        efa = set(catalog.efa_instance_types())
        types = {g.instance_type for g in self.hyperpod.instance_groups} | set(self.gpu_device_plugin_instance_types())
        return sorted(t for t in types if t in efa)

    # Derived names --------------------------------------------------------------------------

    def bucket_names(self) -> dict[str, str]:
        suffix = f"{self.account}-{self.region}"
        return {
            "checkpoints": f"{self.name_prefix}-checkpoints-{suffix}",
            "access_logs": f"{self.name_prefix}-access-logs-{suffix}",
            # 'sagemaker-' prefix: AWS's managed HyperPod instance policy can read such buckets.
            "lifecycle_scripts": f"sagemaker-{self.name_prefix}-lifecycle-{suffix}",
        }

    @property
    def hyperpod_cluster_name(self) -> str:
        return f"{self.name_prefix}-hyperpod"

    @property
    def eks_cluster_name(self) -> str:
        return f"{self.name_prefix}-eks"
>>>>>>> tooling
