"""The lifecycle-script upload: content-hash prefix, BucketDeployment wiring, determinism."""

from __future__ import annotations

import shutil

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Match, Template

from constructs.lifecycle_scripts import LIFECYCLE_SCRIPTS_DIR, LifecycleScripts, content_hash, script_files


def copy_scripts(tmp_path, name):
    target = tmp_path / name
    shutil.copytree(LIFECYCLE_SCRIPTS_DIR, target)
    return target


def test_scripts_are_the_entry_point_and_main_script():
    assert [p.name for p in script_files()] == ["on_create.sh", "on_create_main.sh"]


def test_hash_depends_on_content_only(tmp_path):
    a, b = copy_scripts(tmp_path, "a"), copy_scripts(tmp_path, "b")
    (b / "on_create.sh").touch()  # a newer mtime alone changes nothing
    assert content_hash(a) == content_hash(b) == content_hash()
    with (b / "on_create_main.sh").open("a") as f:
        f.write("# edited\n")
    assert content_hash(b) != content_hash(a)
    assert len(content_hash(b)) == 16


def test_hash_depends_on_file_names(tmp_path):
    a, b = copy_scripts(tmp_path, "a"), copy_scripts(tmp_path, "b")
    (b / "on_create_main.sh").rename(b / "main.sh")
    assert content_hash(a) != content_hash(b)


def _upload_stack(app, stack_id, directory):
    stack = cdk.Stack(app, stack_id, env=cdk.Environment(account="111111111111", region="us-east-1"))
    vpc = ec2.Vpc(stack, "Vpc", availability_zones=["us-east-1a", "us-east-1b"], nat_gateways=1)
    sg = ec2.SecurityGroup(stack, "Sg", vpc=vpc)
    bucket = s3.Bucket.from_bucket_name(stack, "Bucket", "sagemaker-test-lifecycle")
    scripts = LifecycleScripts(
        stack, "Scripts", bucket=bucket, vpc=vpc, security_group=sg, retain_on_delete=False, directory=directory
    )
    return stack, scripts


def test_an_edit_moves_the_upload_to_a_new_prefix_without_new_logical_ids(tmp_path):
    edited = copy_scripts(tmp_path, "edited")
    with (edited / "on_create_main.sh").open("a") as f:
        f.write("# edited\n")
    # The same stack in two apps, once per version of the scripts.
    before_stack, before = _upload_stack(cdk.App(), "Upload", LIFECYCLE_SCRIPTS_DIR)
    after_stack, after = _upload_stack(cdk.App(), "Upload", edited)
    t_before, t_after = Template.from_stack(before_stack), Template.from_stack(after_stack)
    assert before.source_s3_uri == f"s3://sagemaker-test-lifecycle/lifecycle-scripts/{content_hash()}/"
    assert after.source_s3_uri == f"s3://sagemaker-test-lifecycle/lifecycle-scripts/{content_hash(edited)}/"
    assert before.source_s3_uri != after.source_s3_uri
    for t, s in ((t_before, before), (t_after, after)):
        t.has_resource_properties(
            "Custom::CDKBucketDeployment",
            {
                "DestinationBucketName": "sagemaker-test-lifecycle",
                "DestinationBucketKeyPrefix": s.key_prefix,
                "Prune": True,
            },
        )
    assert set(t_before.to_json()["Resources"]) == set(t_after.to_json()["Resources"])


def test_upload_handler_runs_in_the_vpc_private_subnets():
    app = cdk.App()
    stack, _ = _upload_stack(app, "S", LIFECYCLE_SCRIPTS_DIR)
    Template.from_stack(stack).has_resource_properties(
        "AWS::Lambda::Function",
        {"VpcConfig": {"SubnetIds": Match.any_value(), "SecurityGroupIds": [Match.any_value()]}},
    )


def test_bucket_with_token_name_is_refused():
    import pytest

    app = cdk.App()
    stack = cdk.Stack(app, "S")
    vpc = ec2.Vpc(
        stack,
        "Vpc",
        nat_gateways=0,
        subnet_configuration=[ec2.SubnetConfiguration(name="p", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)],
    )
    with pytest.raises(ValueError, match="literal name"):
        LifecycleScripts(
            stack,
            "Scripts",
            bucket=s3.Bucket(stack, "B"),
            vpc=vpc,
            security_group=ec2.SecurityGroup(stack, "Sg", vpc=vpc),
            retain_on_delete=False,
        )
