"""The `hyperpod:` section: the HyperPod cluster and its instance groups."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from pydantic import Field, field_validator, model_validator

from config import catalog
from config.base import Frozen
from config.fields import AzId, k8s_key, k8s_value

DEEP_HEALTH_CHECKS = ("InstanceStress", "InstanceConnectivity")
# AWS::SageMaker::Cluster schema: InstanceCount 0-6758, VolumeSizeInGB 1-16384.
MAX_INSTANCES_PER_GROUP = 6758
EBS_VOLUME_GIB_MIN, EBS_VOLUME_GIB_MAX = 1, 16384
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
GROUP_NAME_RE = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")


class Taint(Frozen):
    """A Kubernetes taint HyperPod puts on every node of the group."""

    key: str = Field(
        description="Taint key, a valid Kubernetes key (optional DNS prefix, '/', name of 1-63 characters)."
    )
    value: str = Field(default="", description="Taint value, at most 63 characters (may be empty).")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = Field(
        description="What the taint does to pods that do not tolerate it."
    )

    @field_validator("key")
    @classmethod
    def _key(cls, v: str) -> str:
        return k8s_key(v, "taint key")

    @field_validator("value")
    @classmethod
    def _value(cls, v: str) -> str:
        return k8s_value(v, f"taint value {v!r} is not valid")


class InstanceGroup(Frozen):
    """One HyperPod instance group: a set of identical nodes with its labels and taints."""

    name: str = Field(
        description="Group name: 1-63 alphanumerics and hyphens, unique in the cluster. Renaming replaces the group."
    )
    instance_type: str = Field(
        description="HyperPod instance type (botocore's ClusterInstanceType enum). Cannot change on an existing group.",
        json_schema_extra={"enum": list(catalog.hyperpod_instance_types())},
    )
    instance_count: int = Field(
        ge=0,
        le=MAX_INSTANCES_PER_GROUP,
        description="Nodes in the group; 0 keeps the group with no nodes (e.g. while capacity waits).",
    )
    threads_per_core: int = Field(
        default=1,
        description="1: multithreading off (one vCPU per core, usual for GPU training); 2: on. Cannot change on an existing group.",
        json_schema_extra={"enum": [1, 2]},
    )
    ebs_volume_gib: int = Field(
        default=500,
        description="EBS volume per node at /opt/sagemaker, GiB (1-16384); containerd images and kubelet state live there.",
    )
    deep_health_checks: list[Literal["InstanceStress", "InstanceConnectivity"]] | None = Field(
        default=None,
        description="Deep health checks on node start; null: InstanceStress on GPU/Trainium types plus InstanceConnectivity with EFA; [] turns them off.",
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="Kubernetes labels on every node of the group (workload: ray-serve marks the serving group).",
    )
    taints: list[Taint] = Field(default_factory=list, description="Kubernetes taints on every node of the group.")
    subnet_az_id: AzId | None = Field(
        default=None,
        description="Put the group in the HyperPod subnet of this AZ ID only; null: every HyperPod subnet.",
    )
    training_plan_arn: str | None = Field(
        default=None, description="SageMaker training plan ARN whose reserved capacity the group uses."
    )

    @field_validator("threads_per_core")
    @classmethod
    def _threads(cls, v: int) -> int:
        if v not in (1, 2):
            raise ValueError(f"{v} threads per core is not allowed; allowed: 1 (multithreading off) or 2 (on)")
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
            k8s_key(key, "label key")
            k8s_value(value, f"label {key}={value!r} has an invalid value")
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
        return catalog.is_trainium(self.instance_type)

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
    """The HyperPod cluster (EKS orchestrator) and its GPU instance groups."""

    node_recovery: Literal["Automatic", "None"] = Field(
        default="Automatic", description="Automatic: HyperPod reboots or replaces a node that fails its health checks."
    )
    # The failure rate of the goodput sweep (sizing/goodput.py). Llama 3's pre-training saw 419
    # unexpected interruptions in 54 days on 16,384 H100s, i.e. 2,048 8-GPU nodes (Dubey et al.
    # 2024, "The Llama 3 Herd of Models", section 3.3.4): 54 x 24 h x 2,048 / 419 = 6,334 h per node.
    node_mtbf_hours: float = Field(
        default=6334.0,
        gt=0,
        description=(
            "Mean time between failures of one GPU node, hours, for the goodput sweep (the cluster's is this over "
            "its training nodes). Default: Llama 3's pre-training, 419 unexpected interruptions in 54 days on "
            "2,048 8-GPU H100 nodes (Dubey et al. 2024, section 3.3.4)."
        ),
    )
    node_replacement_seconds: int = Field(
        default=600,
        ge=0,
        description=(
            "Seconds from a node's failure until its replacement joins the cluster (automatic node recovery: "
            "health check, new instance, lifecycle scripts), for the goodput sweep. Default: 10 minutes."
        ),
    )
    # Continuous (EKS orchestrator only) is required here: the platform encrypts the HyperPod EBS
    # volumes with its customer-managed KMS key, which HyperPod supports only in Continuous mode
    # (SageMaker HyperPod docs, "Customer managed AWS KMS key encryption for SageMaker HyperPod").
    node_provisioning_mode: Literal["Continuous"] | None = Field(
        default="Continuous",
        description="Continuous: scaling per group runs in parallel and failed launches are retried. The only allowed value: null (the standard mode) is refused, as the EBS volumes use the platform's KMS key.",
    )
    instance_groups: list[InstanceGroup] = Field(
        min_length=1, description="The instance groups, at most 100, with unique names."
    )

    @field_validator("node_provisioning_mode")
    @classmethod
    def _mode(cls, v: str | None) -> str | None:
        if v is None:
            raise ValueError(
                "null (the standard provisioning mode) is not allowed: the HyperPod EBS volumes are "
                "encrypted with the platform's customer-managed KMS key, which HyperPod supports "
                "only with NodeProvisioningMode Continuous; allowed: Continuous"
            )
        return v

    @field_validator("instance_groups")
    @classmethod
    def _groups(cls, v: list[InstanceGroup]) -> list[InstanceGroup]:
        if len(v) > MAX_INSTANCE_GROUPS:
            raise ValueError(f"{len(v)} instance groups given; a HyperPod cluster allows at most {MAX_INSTANCE_GROUPS}")
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
            f"no HyperPod instance group named {name!r}; known: " + ", ".join(g.name for g in self.instance_groups)
        )


def default_gpu_group(groups: Sequence[InstanceGroup], *, label: tuple[str, str] | None = None) -> InstanceGroup | None:
    """The instance group a workload runs on when its config names none: the first GPU group
    labelled ``label`` (key, value) where one is, else the first GPU group; None: no GPU group.
    The training job, the RayServices and ``hpray submit job`` all choose it here."""
    gpu = [g for g in groups if g.is_gpu]
    if label is not None:
        for g in gpu:
            if g.labels.get(label[0]) == label[1]:
                return g
    return gpu[0] if gpu else None
