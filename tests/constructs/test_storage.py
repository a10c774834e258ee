"""Stateful storage: KMS key, buckets, FSx for Lustre and its data repository association."""

from __future__ import annotations

import json

import pytest
from aws_cdk.assertions import Match

from tests.conftest import stack_template_fixtures, template_of

STATEFUL_LOGICAL_IDS = {
    "PlatformKey1C4A1A63": "AWS::KMS::Key",
    "BucketsAccessLogsA5F88218": "AWS::S3::Bucket",
    "BucketsCheckpoints180497C2": "AWS::S3::Bucket",
    "BucketsLifecycleScripts6AC3EB47": "AWS::S3::Bucket",
    "LustreFileSystem46590C25": "AWS::FSx::FileSystem",
    "LustreCheckpointsAssociationE20E99BC": "AWS::FSx::DataRepositoryAssociation",
}


dev, prod = stack_template_fixtures("storage", "dev", "prod")


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_stateful_logical_ids_are_stable(env, synthesized):
    """A changed logical ID replaces the key, a bucket or the file system: data loss."""
    _, _, stacks = synthesized(env)
    resources = template_of(stacks.storage).to_json()["Resources"]
    for logical_id, kind in STATEFUL_LOGICAL_IDS.items():
        assert resources[logical_id]["Type"] == kind


def test_kms_key_rotates(dev):
    _, t = dev
    t.has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})


def test_checkpoint_bucket(dev):
    config, t = dev
    t.has_resource_properties(
        "AWS::S3::Bucket",
        {
            "BucketName": config.bucket_names()["checkpoints"],
            "VersioningConfiguration": {"Status": "Enabled"},
            "BucketEncryption": {
                "ServerSideEncryptionConfiguration": [
                    {
                        "BucketKeyEnabled": True,
                        "ServerSideEncryptionByDefault": {
                            "SSEAlgorithm": "aws:kms",
                            "KMSMasterKeyID": {"Fn::GetAtt": ["PlatformKey1C4A1A63", "Arn"]},
                        },
                    }
                ]
            },
            "PublicAccessBlockConfiguration": {
                "BlockPublicAcls": True,
                "BlockPublicPolicy": True,
                "IgnorePublicAcls": True,
                "RestrictPublicBuckets": True,
            },
            "LoggingConfiguration": {
                "DestinationBucketName": {"Ref": "BucketsAccessLogsA5F88218"},
                "LogFilePrefix": "checkpoints/",
            },
            "LifecycleConfiguration": {
                "Rules": [
                    {
                        "Id": "CheckpointHygiene",
                        "Status": "Enabled",
                        "AbortIncompleteMultipartUpload": {
                            "DaysAfterInitiation": config.storage.abort_incomplete_multipart_upload_days
                        },
                        "NoncurrentVersionExpiration": {
                            "NoncurrentDays": config.storage.checkpoint_noncurrent_version_expiration_days
                        },
                    }
                ]
            },
        },
    )


def test_every_bucket_enforces_tls(dev):
    _, t = dev
    policies = t.find_resources("AWS::S3::BucketPolicy")
    assert len(policies) == 3
    for policy in policies.values():
        statements = policy["Properties"]["PolicyDocument"]["Statement"]
        assert any(
            s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for s in statements
        )


def test_lifecycle_scripts_bucket_is_named_for_the_managed_policy(dev):
    config, t = dev
    name = config.bucket_names()["lifecycle_scripts"]
    assert name.startswith("sagemaker-")
    t.has_resource_properties("AWS::S3::Bucket", {"BucketName": name, "VersioningConfiguration": {"Status": "Enabled"}})


def test_dev_tears_down_prod_retains(dev, prod):
    for logical_id in STATEFUL_LOGICAL_IDS:
        assert dev[1].to_json()["Resources"][logical_id]["DeletionPolicy"] == "Delete"
        res = prod[1].to_json()["Resources"][logical_id]
        assert res["DeletionPolicy"] == "Retain" and res["UpdateReplacePolicy"] == "Retain"


def test_no_auto_delete_custom_resource(prod):
    _, t = prod
    assert not t.find_resources("Custom::S3AutoDeleteObjects")
    assert not t.find_resources("AWS::Lambda::Function")


def test_production_stacks_have_termination_protection(synthesized):
    _, _, dev_stacks = synthesized("dev")
    _, _, prod_stacks = synthesized("prod")
    assert prod_stacks.storage.termination_protection and prod_stacks.network.termination_protection
    assert not dev_stacks.storage.termination_protection


def test_fsx_lustre(prod):
    config, t = prod
    t.has_resource_properties(
        "AWS::FSx::FileSystem",
        {
            "FileSystemType": "LUSTRE",
            "FileSystemTypeVersion": "2.15",
            "StorageCapacity": config.fsx.storage_capacity_gib,
            "KmsKeyId": {"Ref": "PlatformKey1C4A1A63"},
            "SubnetIds": [{"Fn::ImportValue": Match.string_like_regexp("HyperPodSubnetUse1az4")}],
            "LustreConfiguration": Match.object_like(
                {
                    "DeploymentType": "PERSISTENT_2",
                    "PerUnitStorageThroughput": config.fsx.throughput_mb_s_per_tib,
                    "DataCompressionType": "LZ4",
                }
            ),
        },
    )


def test_data_repository_association(dev):
    config, t = dev
    t.has_resource_properties(
        "AWS::FSx::DataRepositoryAssociation",
        {
            "FileSystemPath": config.fsx.file_system_path,
            "DataRepositoryPath": {
                "Fn::Join": [
                    "",
                    ["s3://", {"Ref": "BucketsCheckpoints180497C2"}, f"/{config.fsx.import_export_prefix}"],
                ]
            },
            "BatchImportMetaDataOnCreate": True,
            "S3": {
                "AutoImportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]},
                "AutoExportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]},
            },
        },
    )


def test_storage_outputs(dev):
    _, t = dev
    outputs = t.to_json()["Outputs"]
    for name in [
        "FileSystemId",
        "FileSystemDnsName",
        "FileSystemMountName",
        "CheckpointBucketName",
        "LifecycleScriptsBucketName",
        "PlatformKeyArn",
    ]:
        assert name in outputs


@pytest.mark.parametrize("env", ["dev", "staging"])
def test_non_production_buckets_are_emptied_on_delete(env, synthesized):
    """Versioned, non-empty buckets block `cdk destroy`; outside production they are emptied first."""
    _, _, stacks = synthesized(env)
    t = template_of(stacks.storage).to_json()["Resources"]
    emptied = {
        json.dumps(r["Properties"]["BucketName"]) for r in t.values() if r["Type"] == "Custom::S3AutoDeleteObjects"
    }
    buckets = {json.dumps({"Ref": lid}) for lid, r in t.items() if r["Type"] == "AWS::S3::Bucket"}
    assert emptied == buckets and len(buckets) == 3
    handler = next(r for r in t.values() if r["Type"] == "AWS::Lambda::Function")
    assert "DependsOn" not in handler


def test_fsx_service_linked_role_is_a_key_policy_principal(prod):
    """FSx's S3 role has no KMS permission of its own: the key policy must grant it directly, not
    the account root (which only delegates to IAM)."""
    config, t = prod
    (key,) = t.find_resources("AWS::KMS::Key").values()
    (s,) = [x for x in key["Properties"]["KeyPolicy"]["Statement"] if x.get("Sid") == "AllowFsxDataRepositoryAccess"]
    assert s["Principal"] == {"AWS": "*"}
    assert s["Condition"]["ArnLike"] == {
        "aws:PrincipalArn": f"arn:aws:iam::{config.account}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_*"
    }
    assert s["Condition"]["StringEquals"] == {
        "kms:CallerAccount": config.account,
        "kms:ViaService": f"s3.{config.region}.amazonaws.com",
    }
    assert s["Condition"]["StringLike"] == {
        "kms:EncryptionContext:aws:s3:arn": f"arn:aws:s3:::{config.bucket_names()['checkpoints']}"
    }


def test_literal_bucket_name_reads_the_configured_name_and_refuses_a_generated_one():
    """Statements name buckets by their literal ARN (no key/bucket cycle, no cross-stack export):
    the name comes from the bucket object itself, and a bucket CloudFormation names is refused."""
    from aws_cdk import App, Stack
    from aws_cdk import aws_s3 as s3

    from constructs.storage import literal_bucket_name

    stack = Stack(App(), "S")
    assert (
        literal_bucket_name(s3.Bucket(stack, "Named", bucket_name="hpray-dev-checkpoints")) == "hpray-dev-checkpoints"
    )
    assert (
        literal_bucket_name(s3.Bucket.from_bucket_name(stack, "Imported", "hpray-dev-scripts")) == "hpray-dev-scripts"
    )
    with pytest.raises(ValueError, match=r"^bucket S/Generated: no literal name \(give it bucket_name\)$"):
        literal_bucket_name(s3.Bucket(stack, "Generated"))
