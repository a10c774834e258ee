"""Stateful storage: the platform KMS key, the checkpoint, access-log and lifecycle-script
buckets, and FSx for Lustre linked to the checkpoint bucket."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnResource, Duration, RemovalPolicy, Stack, Token
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from config.storage import Fsx, Storage
from constructs.compliance import acknowledge, checkov_skip


def literal_bucket_name(bucket: s3.IBucket) -> str:
    """The bucket's name as written in config: a bucket defined here reports its name as a ``Ref``
    token, but a statement that names it by ARN must not reference it (key and bucket would form a
    cycle, or two stacks an export)."""
    resource = bucket.node.default_child
    name = resource.bucket_name if isinstance(resource, s3.CfnBucket) else bucket.bucket_name
    if not name or Token.is_unresolved(name):
        raise ValueError(f"bucket {bucket.node.path}: no literal name (give it bucket_name)")
    return name


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


def _hardened() -> dict[str, Any]:
    """Every platform bucket: no public access, TLS only, versioned, no ACLs. A function, not a
    module constant: a module of the platform makes no kernel call at import (app.py)."""
    return {
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
        storage_config: Storage,
        key: kms.IKey,
        removal_policy: RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        # Outside production the buckets are destroyed with the stack; they are versioned, so
        # CloudFormation could not delete them while any object version is left: empty them first.
        # Production keeps RETAIN and never empties anything.
        empty_on_delete = removal_policy == RemovalPolicy.DESTROY
        # Server access logs cannot be delivered to an SSE-KMS bucket: SSE-S3 here.
        self.access_logs = s3.Bucket(
            self,
            "AccessLogs",
            bucket_name=names["access_logs"],
            encryption=s3.BucketEncryption.S3_MANAGED,
            **_hardened(),
            removal_policy=removal_policy,
            auto_delete_objects=empty_on_delete,
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
            (
                "NIST.800.53.R5-S3BucketLoggingEnabled",
                "This is the access-log target bucket; logging it to itself would loop.",
            ),
            (
                "NIST.800.53.R5-S3BucketReplicationEnabled",
                "Access logs are kept in-region only; replicating them is not required.",
            ),
            (
                "NIST.800.53.R5-S3DefaultEncryptionKMS",
                "S3 server access logging only delivers to SSE-S3 buckets, not SSE-KMS.",
            ),
        )
        checkov_skip(
            self.access_logs, "CKV_AWS_18", "This is the access-log target bucket; logging it to itself would loop."
        )

        def logged_data_bucket(
            bucket_id: str, *, bucket_name: str, log_prefix: str, rule: s3.LifecycleRule, why_no_replica: str
        ) -> s3.Bucket:
            """A hardened SSE-KMS bucket that logs to the access-log bucket, kept in-region."""
            bucket = s3.Bucket(
                self,
                bucket_id,
                bucket_name=bucket_name,
                **_kms_encrypted(key),
                **_hardened(),
                server_access_logs_bucket=self.access_logs,
                server_access_logs_prefix=log_prefix,
                removal_policy=removal_policy,
                auto_delete_objects=empty_on_delete,
                lifecycle_rules=[rule],
            )
            acknowledge(bucket, ("NIST.800.53.R5-S3BucketReplicationEnabled", why_no_replica))
            return bucket

        self.checkpoints = logged_data_bucket(
            "Checkpoints",
            bucket_name=names["checkpoints"],
            log_prefix="checkpoints/",
            rule=s3.LifecycleRule(
                id="CheckpointHygiene",
                abort_incomplete_multipart_upload_after=Duration.days(
                    storage_config.abort_incomplete_multipart_upload_days
                ),
                noncurrent_version_expiration=Duration.days(
                    storage_config.checkpoint_noncurrent_version_expiration_days
                ),
            ),
            why_no_replica="Checkpoints are reproducible training state, versioned in-region; cross-region replication doubles cost for no recovery need.",
        )
        self.lifecycle_scripts = logged_data_bucket(
            "LifecycleScripts",
            bucket_name=names["lifecycle_scripts"],
            log_prefix="lifecycle-scripts/",
            rule=s3.LifecycleRule(
                id="OldScriptVersions",
                noncurrent_version_expiration=Duration.days(30),
                abort_incomplete_multipart_upload_after=Duration.days(1),
            ),
            why_no_replica="Lifecycle scripts are generated from this repository on every deploy; no replica is needed.",
        )
        if empty_on_delete:
            self._auto_delete_provider_findings()

    def _auto_delete_provider_findings(self) -> None:
        """The stack-wide Lambda aws-cdk-lib adds for ``auto_delete_objects`` (deletes objects only
        when its bucket is deleted; tagged buckets of this stack only)."""
        stack = Stack.of(self)
        provider = stack.node.find_child("Custom::S3AutoDeleteObjectsCustomResourceProvider")
        handler = provider.node.find_child("Handler")
        assert isinstance(handler, CfnResource)
        # aws-cdk-lib adds a DependsOn on the role that the Role GetAtt already implies (cfn-lint W3005).
        handler.add_deletion_override("DependsOn")
        reason = (
            "Deploy-time custom resource handler of aws-cdk-lib that empties non-production buckets on stack deletion; "
        )
        checkov_skip(handler, "CKV_AWS_115", reason + "a concurrency limit could only fail a teardown.")
        checkov_skip(
            handler,
            "CKV_AWS_116",
            reason + "invoked synchronously by CloudFormation, which reports failures; a DLQ would stay empty.",
        )
        checkov_skip(
            handler,
            "CKV_AWS_117",
            reason
            + "it calls only the S3 API and holds no data; it runs outside the VPC like every CDK provider of this kind.",
        )
        checkov_skip(handler, "CKV_AWS_173", reason + "its environment holds no variables.")


def fsx_s3_service_linked_role_arn(stack: Stack) -> str:
    """FSx's S3-access service-linked roles of this account (one per file system)."""
    return (
        f"arn:{stack.partition}:iam::{stack.account}:role/aws-service-role/"
        "s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_*"
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
        """``bucket``: the checkpoint bucket, named in config (:func:`literal_bucket_name`)."""
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
        # FSx reaches the bucket through its S3-access service-linked role
        # (AWSServiceRoleForFSxS3Access_<file system id>), whose own policy grants no KMS access: the
        # key policy must name that role as a principal (FSx for Lustre user guide, "Working with
        # server-side encrypted Amazon S3 buckets",
        # https://docs.aws.amazon.com/fsx/latest/LustreGuide/s3-server-side-encryption-support.html).
        # The role's name holds the file system ID, and the file system is encrypted with this same
        # key, so the ARN cannot be written into the key policy without a dependency cycle. Principal
        # "*" narrowed by aws:PrincipalArn to FSx's S3 service-linked roles in this account grants the
        # role directly (an account-root principal would only delegate to IAM), through S3 only, for
        # this one bucket (bucket keys are on: the encryption context is the bucket ARN, per the same guide).
        stack = Stack.of(self)
        statement = iam.PolicyStatement(
            sid="AllowFsxDataRepositoryAccess",
            principals=[iam.AnyPrincipal()],
            actions=["kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey*", "kms:ReEncrypt*", "kms:DescribeKey"],
            resources=["*"],
            conditions={
                "ArnLike": {"aws:PrincipalArn": fsx_s3_service_linked_role_arn(stack)},
                "StringEquals": {
                    "kms:CallerAccount": stack.account,
                    "kms:ViaService": f"s3.{stack.region}.amazonaws.com",
                },
                # The literal name: the bucket's own ARN attribute would make key and bucket a cycle.
                "StringLike": {
                    "kms:EncryptionContext:aws:s3:arn": f"arn:{stack.partition}:s3:::{literal_bucket_name(bucket)}"
                },
            },
        )
        key.add_to_resource_policy(statement)
        checkov_skip(
            key,
            "CKV_AWS_33",
            "The one '*' principal is narrowed by aws:PrincipalArn to FSx's S3 service-linked roles of this account, "
            "kms:CallerAccount, kms:ViaService S3 and the checkpoint bucket's encryption context; the role's name holds "
            "the file system ID, which this key encrypts, so it cannot be named without a cycle.",
        )
