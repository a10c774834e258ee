"""The Ray workloads' side of the cluster: their namespace, a service account whose Pod Identity
role reaches exactly the S3 prefixes the workloads read or write (``constructs.flows.s3_locations``:
the checkpoint prefix, and any s3:// training data, run storage or model weights in config; the
platform key for those in the checkpoint bucket), and the FSx for Lustre StorageClass, static
PersistentVolume and ReadWriteMany claim.

The manifest builders are pure functions (tests validate them offline against Kubernetes
schemas); the construct applies them and wires IAM.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aws_cdk import Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from config.facts.names import FSX_PVC, FSX_STORAGE_CLASS, WORKLOADS_NAMESPACE, WORKLOADS_SERVICE_ACCOUNT
from config.storage import Fsx
from constructs.compliance import acknowledge
from constructs.eks_cluster import PlatformEksCluster, pod_identity_role
from constructs.flows import S3Location
from constructs.storage import literal_bucket_name

FSX_PV = "fsx-pv"
FSX_CSI_DRIVER = "fsx.csi.aws.com"
_LABELS = {"app.kubernetes.io/part-of": "hyperpod-ray", "app.kubernetes.io/managed-by": "aws-cdk"}


def workloads_namespace_manifest() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": WORKLOADS_NAMESPACE, "labels": dict(_LABELS)}}


def workloads_service_account_manifest() -> dict[str, Any]:
    # No role annotation: EKS Pod Identity maps the account to its role by association.
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": WORKLOADS_SERVICE_ACCOUNT, "namespace": WORKLOADS_NAMESPACE, "labels": dict(_LABELS)},
    }


@dataclass(frozen=True)
class FsxVolume:
    """The storage stack's FSx for Lustre file system, as Kubernetes volumes name it."""

    file_system_id: str
    dns_name: str
    mount_name: str
    storage_capacity_gib: int


def fsx_claim_manifests(fsx: FsxVolume, *, namespace: str, volume_name: str) -> list[dict[str, Any]]:
    """A static PersistentVolume for the file system and the ReadWriteMany claim ``FSX_PVC`` in
    ``namespace`` bound to exactly that volume (a volume binds one claim, so each namespace that
    mounts /fsx has its own volume of the same file system)."""
    capacity = f"{fsx.storage_capacity_gib}Gi"
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": volume_name, "labels": dict(_LABELS)},
        "spec": {
            "capacity": {"storage": capacity},
            "volumeMode": "Filesystem",
            "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": FSX_STORAGE_CLASS,
            # flock: Ray Train and PyTorch checkpoint writers lock files on the shared file system.
            "mountOptions": ["flock"],
            "csi": {
                "driver": FSX_CSI_DRIVER,
                "volumeHandle": fsx.file_system_id,
                "volumeAttributes": {"dnsname": fsx.dns_name, "mountname": fsx.mount_name},
            },
            # Only this namespace's claim may bind it.
            "claimRef": {"namespace": namespace, "name": FSX_PVC},
        },
    }
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": FSX_PVC, "namespace": namespace, "labels": dict(_LABELS)},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": FSX_STORAGE_CLASS,
            "volumeName": volume_name,
            "resources": {"requests": {"storage": capacity}},
        },
    }
    return [volume, claim]


def fsx_manifests(
    *, file_system_id: str, dns_name: str, mount_name: str, storage_capacity_gib: int
) -> list[dict[str, Any]]:
    """StorageClass, static PersistentVolume for one existing FSx for Lustre file system, and the
    ReadWriteMany claim of the workloads' namespace bound to exactly that volume."""
    storage_class = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": FSX_STORAGE_CLASS, "labels": dict(_LABELS)},
        "provisioner": FSX_CSI_DRIVER,
        # The file system belongs to the storage stack: Kubernetes never deletes it.
        "reclaimPolicy": "Retain",
        "volumeBindingMode": "Immediate",
        "mountOptions": ["flock"],
    }
    fsx = FsxVolume(file_system_id, dns_name, mount_name, storage_capacity_gib)
    return [storage_class, *fsx_claim_manifests(fsx, namespace=WORKLOADS_NAMESPACE, volume_name=FSX_PV)]


READ_ACTIONS = ("s3:GetObject",)
WRITE_ACTIONS = (
    "s3:GetObject",
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:AbortMultipartUpload",
    "s3:ListMultipartUploadParts",
)


def checkpoint_statements(*, bucket_arn: str, prefix: str) -> list[iam.PolicyStatement]:
    """S3 access to exactly ``prefix`` of the checkpoint bucket: list it, read, write, delete."""
    return prefix_statements(
        bucket_arn=bucket_arn,
        prefix=prefix,
        write=True,
        list_sid="ListCheckpointPrefix",
        object_sid="ReadWriteCheckpoints",
    )


def prefix_statements(
    *, bucket_arn: str, prefix: str, write: bool, list_sid: str, object_sid: str
) -> list[iam.PolicyStatement]:
    """List ``prefix`` of one bucket, and read (and with ``write`` also write and delete) its objects."""
    return [
        iam.PolicyStatement(
            sid=list_sid,
            actions=["s3:ListBucket"],
            resources=[bucket_arn],
            conditions={"StringLike": {"s3:prefix": [prefix, f"{prefix}*"]}},
        ),
        iam.PolicyStatement(
            sid=object_sid,
            actions=list(WRITE_ACTIONS if write else READ_ACTIONS),
            resources=[f"{bucket_arn}/{prefix}*"],
        ),
    ]


def _sid(source: str) -> str:
    """A statement id from a config field name: inference.llm.model_source -> InferenceLlmModelSource."""
    return "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", source))


class WorkloadsAccess(Construct):
    """Namespace, service account + Pod Identity role, FSx StorageClass/PV/PVC."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: PlatformEksCluster,
        checkpoint_bucket: s3.IBucket,
        locations: Sequence[S3Location],
        key: kms.IKey,
        file_system: fsx.LustreFileSystem,
        fsx_config: Fsx,
    ) -> None:
        """``checkpoint_bucket``: the storage stack's checkpoint bucket (``locations[0]``);
        ``file_system``: the storage stack's FSx for Lustre file system, of ``fsx_config``'s
        capacity, as the workloads' static volume."""
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.namespace = cluster.manifest(self, "Namespace", [workloads_namespace_manifest()])
        # The Pod Identity association below needs the agent.
        cluster.requires(self.namespace, "eks-pod-identity-agent")
        self.service_account = cluster.manifest(self, "ServiceAccount", [workloads_service_account_manifest()])
        self.service_account.node.add_dependency(self.namespace)

        self.role = pod_identity_role(self, "Role", description="Ray workloads: the S3 prefixes they read and write")
        acks = []
        for i, loc in enumerate(locations):
            # Buckets by their literal names (config): statements and acknowledgements name real ARNs.
            bucket_arn = f"arn:{stack.partition}:s3:::{loc.bucket}"
            if i == 0:
                statements = checkpoint_statements(bucket_arn=bucket_arn, prefix=loc.prefix)
            else:
                sid = _sid(loc.source)
                statements = prefix_statements(
                    bucket_arn=bucket_arn,
                    prefix=loc.prefix,
                    write=loc.write,
                    list_sid=f"List{sid}",
                    object_sid=("ReadWrite" if loc.write else "Read") + sid,
                )
            for statement in statements:
                self.role.add_to_policy(statement)
            acks.append(
                (
                    f"AwsSolutions-IAM5[Resource::{bucket_arn}/{loc.prefix}*]",
                    f"Object names under {loc.prefix} ({loc.source}) are chosen at run time (Ray Train, model files); the wildcard is confined to that prefix of one bucket.",
                )
            )
        # SSE-KMS with a bucket key: S3 calls KMS on the role's behalf.
        writes = any(loc.write for loc in locations if loc.bucket == literal_bucket_name(checkpoint_bucket))
        self.role.add_to_policy(
            iam.PolicyStatement(
                sid="CheckpointKey",
                actions=["kms:Decrypt", "kms:GenerateDataKey"] if writes else ["kms:Decrypt"],
                resources=[key.key_arn],
                conditions={"StringEquals": {"kms:ViaService": f"s3.{stack.region}.amazonaws.com"}},
            )
        )
        acknowledge(
            self.role,
            *dict(acks).items(),
            (
                "NIST.800.53.R5-IAMNoInlinePolicy",
                "The statements live beside the service account that needs them and are scoped to the configured bucket prefixes and one key.",
            ),
        )
        self.pod_identity = eks.CfnPodIdentityAssociation(
            self,
            "PodIdentity",
            cluster_name=cluster.cluster_name,
            namespace=WORKLOADS_NAMESPACE,
            service_account=WORKLOADS_SERVICE_ACCOUNT,
            role_arn=self.role.role_arn,
        )
        self.pod_identity.node.add_dependency(self.service_account)

        self.fsx = cluster.manifest(
            self,
            "FsxVolume",
            fsx_manifests(
                file_system_id=file_system.file_system_id,
                dns_name=file_system.dns_name,
                mount_name=file_system.mount_name,
                storage_capacity_gib=fsx_config.storage_capacity_gib,
            ),
        )
        cluster.requires(self.fsx, "aws-fsx-csi-driver", after=[self.namespace])
