"""The Ray workloads' side of the cluster: their namespace, a service account whose Pod Identity
role reads and writes only the checkpoint prefix of the checkpoint bucket (and uses its KMS key),
and the FSx for Lustre StorageClass, static PersistentVolume and ReadWriteMany claim.

The manifest builders are pure functions (tests validate them offline against Kubernetes
schemas); the construct applies them and wires IAM.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aws_cdk import Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct, IConstruct

from constructs.compliance import acknowledge
from constructs.eks_cluster import pod_identity_role
from constructs.k8s_names import FSX_PVC, FSX_STORAGE_CLASS, WORKLOADS_NAMESPACE, WORKLOADS_SERVICE_ACCOUNT

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


def fsx_manifests(*, file_system_id: str, dns_name: str, mount_name: str, storage_capacity_gib: int) -> list[dict[str, Any]]:
    """StorageClass, static PersistentVolume for one existing FSx for Lustre file system, and the
    ReadWriteMany claim bound to exactly that volume."""
    capacity = f"{storage_capacity_gib}Gi"
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
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": FSX_PV, "labels": dict(_LABELS)},
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
                "volumeHandle": file_system_id,
                "volumeAttributes": {"dnsname": dns_name, "mountname": mount_name},
            },
            # Only the workloads' claim may bind it.
            "claimRef": {"namespace": WORKLOADS_NAMESPACE, "name": FSX_PVC},
        },
    }
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": FSX_PVC, "namespace": WORKLOADS_NAMESPACE, "labels": dict(_LABELS)},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": FSX_STORAGE_CLASS,
            "volumeName": FSX_PV,
            "resources": {"requests": {"storage": capacity}},
        },
    }
    return [storage_class, volume, claim]


def checkpoint_statements(*, bucket_arn: str, prefix: str) -> list[iam.PolicyStatement]:
    """S3 access to exactly ``prefix`` of the checkpoint bucket: list it, read, write, delete."""
    return [
        iam.PolicyStatement(
            sid="ListCheckpointPrefix",
            actions=["s3:ListBucket"],
            resources=[bucket_arn],
            conditions={"StringLike": {"s3:prefix": [prefix, f"{prefix}*"]}},
        ),
        iam.PolicyStatement(
            sid="ReadWriteCheckpoints",
            actions=["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"],
            resources=[f"{bucket_arn}/{prefix}*"],
        ),
    ]


def job_code_statements(*, bucket_arn: str, prefix: str) -> list[iam.PolicyStatement]:
    """Read-only S3 access to ``prefix``, where ``hpray submit job`` uploads a job's working
    directory (config/jobs.py): Ray pods download it as their runtime_env working_dir."""
    return [
        iam.PolicyStatement(
            sid="ListJobCode",
            actions=["s3:ListBucket"],
            resources=[bucket_arn],
            conditions={"StringLike": {"s3:prefix": [prefix, f"{prefix}*"]}},
        ),
        iam.PolicyStatement(sid="ReadJobCode", actions=["s3:GetObject"], resources=[f"{bucket_arn}/{prefix}*"]),
    ]


class WorkloadsAccess(Construct):
    """Namespace, service account + Pod Identity role, FSx StorageClass/PV/PVC."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.Cluster,
        checkpoint_bucket_name: str,
        checkpoint_prefix: str,
        key: kms.IKey,
        job_code_prefix: str | None = None,
        file_system_id: str,
        dns_name: str,
        mount_name: str,
        storage_capacity_gib: int,
        namespace_depends_on: Sequence[IConstruct],
        storage_depends_on: Sequence[IConstruct],
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.namespace = eks.KubernetesManifest(self, "Namespace", cluster=cluster, manifest=[workloads_namespace_manifest()])
        for dependency in namespace_depends_on:
            self.namespace.node.add_dependency(dependency)
        self.service_account = eks.KubernetesManifest(
            self, "ServiceAccount", cluster=cluster, manifest=[workloads_service_account_manifest()]
        )
        self.service_account.node.add_dependency(self.namespace)

        self.role = pod_identity_role(self, "Role", description="Ray workloads: checkpoint prefix of the checkpoint bucket")
        # The bucket by its literal name (config): statements and acknowledgements name a real ARN.
        bucket_arn = f"arn:{stack.partition}:s3:::{checkpoint_bucket_name}"
        for statement in checkpoint_statements(bucket_arn=bucket_arn, prefix=checkpoint_prefix):
            self.role.add_to_policy(statement)
        if job_code_prefix:
            for statement in job_code_statements(bucket_arn=bucket_arn, prefix=job_code_prefix):
                self.role.add_to_policy(statement)
        # SSE-KMS with a bucket key: S3 calls KMS on the role's behalf.
        self.role.add_to_policy(
            iam.PolicyStatement(
                sid="CheckpointKey",
                actions=["kms:Decrypt", "kms:GenerateDataKey"],
                resources=[key.key_arn],
                conditions={"StringEquals": {"kms:ViaService": f"s3.{stack.region}.amazonaws.com"}},
            )
        )
        acknowledge(
            self.role,
            (f"AwsSolutions-IAM5[Resource::{bucket_arn}/{checkpoint_prefix}*]", "Checkpoint object names are chosen by Ray Train at run time; the wildcard is confined to the checkpoint prefix of this one bucket."),
            *(
                [(f"AwsSolutions-IAM5[Resource::{bucket_arn}/{job_code_prefix}*]", "Each submitted job's code is a zip under its own name below this prefix, chosen at submit time; the role may only read it.")]
                if job_code_prefix
                else []
            ),
            ("NIST.800.53.R5-IAMNoInlinePolicy", "The statements live beside the service account that needs them and are scoped to one bucket prefix and one key."),
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

        self.fsx = eks.KubernetesManifest(
            self,
            "FsxVolume",
            cluster=cluster,
            manifest=fsx_manifests(
                file_system_id=file_system_id, dns_name=dns_name, mount_name=mount_name,
                storage_capacity_gib=storage_capacity_gib,
            ),
        )
        self.fsx.node.add_dependency(self.namespace)
        for dependency in storage_depends_on:
            self.fsx.node.add_dependency(dependency)
