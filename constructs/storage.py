"""Stateful storage: the platform KMS key, the checkpoint, access-log and lifecycle-script
buckets, and FSx for Lustre linked to the checkpoint bucket."""

from __future__ import annotations

from typing import Any

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from config.model import Fsx, Storage
from constructs.compliance import acknowledge, checkov_skip


class PlatformKey(Construct):
    """The customer-managed key for every data store of the platform, rotated yearly."""

    def __init__(self, scope: Construct, construct_id: str, *, removal_policy: RemovalPolicy) -> None:
        super().__init__(scope, construct_id)
        self.key = kms.Key(
            self,
            "Key",
            description="HyperPod Ray platform: S3 checkpoints, FSx, EBS, EKS secrets",
            enable_key_rotation=True,
            pending_window=Duration.days(30),
            removal_policy=removal_policy,
        )


# Every platform bucket: no public access, TLS only, versioned, no ACLs.
_HARDENED: dict[str, Any] = {
    "block_public_access": s3.BlockPublicAccess.BLOCK_ALL,
    "enforce_ssl": True,
    "versioned": True,
    "object_ownership": s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
}


def _kms_encrypted(key: kms.IKey) -> dict[str, Any]:
    """SSE-KMS with the platform key; the bucket key cuts KMS requests (and cost) per object."""
    return {"encryption": s3.BucketEncryption.KMS, "encryption_key": key, "bucket_key_enabled": True}


class PlatformBuckets(Construct):
    """Checkpoint bucket (SSE-KMS), its access-log bucket, and the lifecycle-scripts bucket."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        names: dict[str, str],
        storage: Storage,
        key: kms.IKey,
        removal_policy: RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        # Server access logs cannot be delivered to an SSE-KMS bucket: SSE-S3 here.
        self.access_logs = s3.Bucket(
            self,
            "AccessLogs",
            bucket_name=names["access_logs"],
            encryption=s3.BucketEncryption.S3_MANAGED,
            **_HARDENED,
            removal_policy=removal_policy,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="ExpireAccessLogs",
                    expiration=Duration.days(365),
                    noncurrent_version_expiration=Duration.days(30),
                    abort_incomplete_multipart_upload_after=Duration.days(1),
                )
            ],
        )
        acknowledge(
            self.access_logs,
            ("AwsSolutions-S1", "This is the access-log target bucket; logging it to itself would loop."),
            ("NIST.800.53.R5-S3BucketLoggingEnabled", "This is the access-log target bucket; logging it to itself would loop."),
            ("NIST.800.53.R5-S3BucketReplicationEnabled", "Access logs are kept in-region only; replicating them is not required."),
            ("NIST.800.53.R5-S3DefaultEncryptionKMS", "S3 server access logging only delivers to SSE-S3 buckets, not SSE-KMS."),
        )
        checkov_skip(self.access_logs, "CKV_AWS_18", "This is the access-log target bucket; logging it to itself would loop.")
        self.checkpoints = s3.Bucket(
            self,
            "Checkpoints",
            bucket_name=names["checkpoints"],
            **_kms_encrypted(key),
            **_HARDENED,
            server_access_logs_bucket=self.access_logs,
            server_access_logs_prefix="checkpoints/",
            removal_policy=removal_policy,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="CheckpointHygiene",
                    abort_incomplete_multipart_upload_after=Duration.days(
                        storage.abort_incomplete_multipart_upload_days
                    ),
                    noncurrent_version_expiration=Duration.days(
                        storage.checkpoint_noncurrent_version_expiration_days
                    ),
                )
            ],
        )
        acknowledge(
            self.checkpoints,
            ("NIST.800.53.R5-S3BucketReplicationEnabled", "Checkpoints are reproducible training state, versioned in-region; cross-region replication doubles cost for no recovery need."),
        )
        self.lifecycle_scripts = s3.Bucket(
            self,
            "LifecycleScripts",
            bucket_name=names["lifecycle_scripts"],
            **_kms_encrypted(key),
            **_HARDENED,
            server_access_logs_bucket=self.access_logs,
            server_access_logs_prefix="lifecycle-scripts/",
            removal_policy=removal_policy,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="OldScriptVersions",
                    noncurrent_version_expiration=Duration.days(30),
                    abort_incomplete_multipart_upload_after=Duration.days(1),
                )
            ],
        )
        acknowledge(
            self.lifecycle_scripts,
            ("NIST.800.53.R5-S3BucketReplicationEnabled", "Lifecycle scripts are generated from this repository on every deploy; no replica is needed."),
        )


class LustreFileSystem(Construct):
    """FSx for Lustre PERSISTENT_2 in a HyperPod subnet, linked to the checkpoint bucket."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        fsx_config: Fsx,
        vpc: ec2.IVpc,
        subnet: ec2.ISubnet,
        security_group: ec2.ISecurityGroup,
        key: kms.IKey,
        bucket: s3.IBucket,
        removal_policy: RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        self.file_system = fsx.LustreFileSystem(
            self,
            "FileSystem",
            vpc=vpc,
            vpc_subnet=subnet,
            security_group=security_group,
            storage_capacity_gib=fsx_config.storage_capacity_gib,
            kms_key=key,
            file_system_type_version=fsx.FileSystemTypeVersion.V_2_15,
            removal_policy=removal_policy,
            lustre_configuration=fsx.LustreConfiguration(
                deployment_type=fsx.LustreDeploymentType.PERSISTENT_2,
                per_unit_storage_throughput=fsx_config.throughput_mb_s_per_tib,
                data_compression_type=fsx.LustreDataCompressionType(fsx_config.data_compression),
                automatic_backup_retention=Duration.days(7),
                daily_automatic_backup_start_time=fsx.DailyAutomaticBackupStartTime(hour=5, minute=0),
                copy_tags_to_backups=True,
            ),
        )
        self.data_repository_association = fsx.CfnDataRepositoryAssociation(
            self,
            "CheckpointsAssociation",
            file_system_id=self.file_system.file_system_id,
            file_system_path=fsx_config.file_system_path,
            data_repository_path=f"s3://{bucket.bucket_name}/{fsx_config.import_export_prefix}",
            batch_import_meta_data_on_create=True,
            s3=fsx.CfnDataRepositoryAssociation.S3Property(
                auto_import_policy=fsx.CfnDataRepositoryAssociation.AutoImportPolicyProperty(
                    events=["NEW", "CHANGED", "DELETED"]
                ),
                auto_export_policy=fsx.CfnDataRepositoryAssociation.AutoExportPolicyProperty(
                    events=["NEW", "CHANGED", "DELETED"]
                ),
            ),
        )
        self.data_repository_association.apply_removal_policy(removal_policy)
        # FSx reaches the bucket through its S3-access service-linked role; the key must let it
        # use the key for objects in that bucket (the role is created per file system).
        stack = Stack.of(self)
        key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowFsxDataRepositoryAccess",
                principals=[iam.AccountRootPrincipal()],
                actions=["kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey", "kms:ReEncrypt*", "kms:DescribeKey"],
                resources=["*"],
                conditions={
                    "ArnLike": {
                        "aws:PrincipalArn": f"arn:{stack.partition}:iam::{stack.account}:role/aws-service-role/"
                        "s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_*"
                    },
                    "StringEquals": {"kms:ViaService": f"s3.{stack.region}.amazonaws.com"},
                },
            )
        )

    @property
    def mount_name(self) -> str:
        return self.file_system.mount_name

    @property
    def dns_name(self) -> str:
        return self.file_system.dns_name
