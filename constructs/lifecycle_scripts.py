"""The HyperPod lifecycle scripts (``lifecycle_scripts/``), uploaded to the lifecycle-scripts
bucket under a prefix named after a hash of their content.

A new hash means a new prefix, and the cluster's ``SourceS3Uri`` points at it: an edited script
changes the template, so it can never be left stale on S3 behind an unchanged cluster. Old
prefixes stay (``retain_on_delete``) until an operator removes them, so a node replaced while a
deploy moves the cluster to the new prefix still finds the scripts the cluster names.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import Stack, Token
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_deployment as s3deploy
from constructs import Construct

from constructs.compliance import acknowledge, checkov_skip

LIFECYCLE_SCRIPTS_DIR = Path(__file__).resolve().parent.parent / "lifecycle_scripts"
# The entry point HyperPod runs (LifeCycleConfig.OnCreate); it runs the main script beside it.
ON_CREATE_SCRIPT = "on_create.sh"
# Every upload lives under this prefix of the bucket; the execution role reads only the current one.
KEY_PREFIX_ROOT = "lifecycle-scripts"
# 16 hex digits (64 bits) of SHA-256: collisions between two script versions are not a concern,
# and the S3 URI stays short enough to read in the console.
HASH_LENGTH = 16

# The singleton Lambda that BucketDeployment adds to the stack: its id starts with this.
_DEPLOYMENT_HANDLER_PREFIX = "Custom::CDKBucketDeployment"


def nag_env(stack: Stack) -> tuple[str, str, str]:
    """Partition, region and account as cdk-nag writes them in granular finding ids: the literal
    value when the stack has one, else the pseudo parameter (e.g. ``<AWS::Partition>``)."""

    def text(value: str, pseudo: str) -> str:
        return f"<AWS::{pseudo}>" if Token.is_unresolved(value) else value

    return text(stack.partition, "Partition"), text(stack.region, "Region"), text(stack.account, "AccountId")


def script_files(directory: Path = LIFECYCLE_SCRIPTS_DIR) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file())


def content_hash(directory: Path = LIFECYCLE_SCRIPTS_DIR) -> str:
    """SHA-256 over every file's relative path and bytes, in sorted order: same scripts, same hash."""
    digest = hashlib.sha256()
    for path in script_files(directory):
        digest.update(path.relative_to(directory).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()[:HASH_LENGTH]


class LifecycleScripts(Construct):
    """Uploads ``lifecycle_scripts/`` to ``s3://BUCKET/lifecycle-scripts/HASH/``.

    BucketDeployment is a Lambda-backed custom resource: CloudFormation has no native resource
    that writes an S3 object, and cdk-assets can only publish to the bootstrap bucket. Its Lambda
    runs in the VPC's private subnets; every cdk-nag/checkov finding on it is acknowledged below
    with its reason.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        bucket: s3.IBucket,
        vpc: ec2.IVpc,
        security_group: ec2.ISecurityGroup,
        retain_on_delete: bool,
        directory: Path = LIFECYCLE_SCRIPTS_DIR,
    ) -> None:
        super().__init__(scope, construct_id)
        if Token.is_unresolved(bucket.bucket_name):
            raise ValueError(
                "LifecycleScripts needs a bucket with a literal name (s3.Bucket.from_bucket_attributes"
                "(bucket_name=...)), so that its IAM statements and their acknowledgements name real ARNs"
            )
        self.bucket = bucket
        self.hash = content_hash(directory)
        self.key_prefix = f"{KEY_PREFIX_ROOT}/{self.hash}/"
        self.on_create = ON_CREATE_SCRIPT
        self.deployment = s3deploy.BucketDeployment(
            self,
            "Upload",
            destination_bucket=bucket,
            destination_key_prefix=self.key_prefix,
            sources=[s3deploy.Source.asset(str(directory))],
            # The prefix is unique to this content: pruning it can only remove nothing or strays.
            prune=True,
            retain_on_delete=retain_on_delete,
            vpc=vpc,
            vpc_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            security_groups=[security_group],
        )
        # The custom resource that performs the copy (the deployment's other child is its layer).
        self.upload = next(c for c in self.deployment.node.children if isinstance(c, cdk.CustomResource))
        self._acknowledge_handler()

    @property
    def source_s3_uri(self) -> str:
        return f"s3://{self.bucket.bucket_name}/{self.key_prefix}"

    @property
    def objects_arn(self) -> str:
        """ARN pattern of exactly the objects of this upload."""
        return self.bucket.arn_for_objects(f"{self.key_prefix}*")

    def objects_arn_for_nag(self) -> str:
        partition, _, _ = nag_env(Stack.of(self))
        return f"arn:{partition}:s3:::{self.bucket.bucket_name}/{self.key_prefix}*"

    def _acknowledge_handler(self) -> None:
        stack = Stack.of(self)
        handlers = [c for c in stack.node.children if c.node.id.startswith(_DEPLOYMENT_HANDLER_PREFIX)]
        if len(handlers) != 1:
            raise RuntimeError(
                f"expected one BucketDeployment handler ({_DEPLOYMENT_HANDLER_PREFIX}*) in "
                f"{stack.node.path}, found {len(handlers)}; update constructs/lifecycle_scripts.py"
            )
        handler = handlers[0]
        acknowledge(
            handler,
            (
                "AwsSolutions-L1",
                "The handler is aws-cdk-lib's BucketDeployment Lambda; its runtime is pinned by aws-cdk-lib (requirements.lock) and moves with it.",
            ),
            (
                "NIST.800.53.R5-LambdaConcurrency",
                "It runs once per deploy from CloudFormation; a concurrency reservation would only take capacity from the account.",
            ),
            (
                "NIST.800.53.R5-LambdaDLQ",
                "It is invoked synchronously by CloudFormation, which reports every failure on the stack; a DLQ would never receive events.",
            ),
        )
        checkov_skip(
            handler,
            "CKV_AWS_115",
            "Runs once per deploy from CloudFormation; a concurrency reservation would only take capacity from the account.",
        )
        checkov_skip(
            handler,
            "CKV_AWS_116",
            "Invoked synchronously by CloudFormation, which reports every failure; a DLQ would never receive events.",
        )
        checkov_skip(
            handler,
            "CKV_AWS_173",
            "Its environment holds no secrets, only aws-cdk-lib's fixed settings; the default AWS-managed key is enough.",
        )
        role = handler.node.find_child("ServiceRole")
        # aws-cdk-lib makes the function DependsOn its role although the Role GetAtt already orders
        # them (cfn-lint W3005); keep only the policy, which the GetAtt does not cover.
        function = handler.node.find_child("Resource")
        policy = role.node.find_child("DefaultPolicy")
        function.add_override("DependsOn", [stack.get_logical_id(policy.node.default_child)])
        acknowledge(
            role,
            (
                "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
                "aws-cdk-lib attaches it so the handler can write its own CloudWatch logs; it grants nothing else.",
            ),
            (
                "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole]",
                "aws-cdk-lib attaches it so the handler can create its ENIs in the private subnets, which a Lambda in a VPC needs.",
            ),
        )
        # Granular ids name the literal ARNs: the bucket must have a literal name (see __init__).
        partition, region, account = nag_env(stack)
        assets_bucket = f"cdk-{cdk.DefaultStackSynthesizer.DEFAULT_QUALIFIER}-assets-{account}-{region}"
        copy = "BucketDeployment copies the asset zip into this bucket's prefix and needs"
        acknowledge(
            policy,
            (
                "AwsSolutions-IAM5[Action::s3:GetObject*]",
                f"{copy} to read the CDK asset object and the objects it replaces.",
            ),
            ("AwsSolutions-IAM5[Action::s3:GetBucket*]", f"{copy} the bucket's location and settings for the copy."),
            ("AwsSolutions-IAM5[Action::s3:List*]", f"{copy} to list the destination prefix to prune stray objects."),
            ("AwsSolutions-IAM5[Action::s3:Abort*]", f"{copy} to abort its own multipart uploads on failure."),
            (
                "AwsSolutions-IAM5[Action::s3:DeleteObject*]",
                f"{copy} to prune objects of this prefix that are not in the asset.",
            ),
            (
                "AwsSolutions-IAM5[Action::kms:GenerateDataKey*]",
                f"{copy} data keys of the platform key to write SSE-KMS objects.",
            ),
            (
                "AwsSolutions-IAM5[Action::kms:ReEncrypt*]",
                f"{copy} to re-encrypt under the platform key when it overwrites objects.",
            ),
            (
                f"AwsSolutions-IAM5[Resource::arn:{partition}:s3:::{assets_bucket}/*]",
                "The asset object key is a content hash chosen at deploy time by cdk-assets; access is limited to the bootstrap assets bucket of this account and region.",
            ),
            (
                f"AwsSolutions-IAM5[Resource::arn:{partition}:s3:::{self.bucket.bucket_name}/*]",
                "The handler writes only under this upload's prefix, but aws-cdk-lib grants it on the whole lifecycle-scripts bucket, which holds nothing else.",
            ),
            (
                "NIST.800.53.R5-IAMNoInlinePolicy",
                "The inline policy is generated by BucketDeployment and scoped to the asset bucket, this bucket and its key.",
            ),
        )
