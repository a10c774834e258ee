"""Compare mode: added, removed and replaced resources, IAM and SG changes, cost delta."""

from __future__ import annotations

import copy

import pytest

from review.__main__ import main
from review.assembly import load_assembly
from review.compare import compare


@pytest.fixture
def old_and_new(assembly_dir, cluster_tpl):
    old = cluster_tpl(nat_gateways=1, bucket_name="ckpt-old")
    old["Resources"]["Scratch"] = {"Type": "AWS::S3::Bucket", "Properties": {}}
    new = copy.deepcopy(cluster_tpl(nat_gateways=2, bucket_name="ckpt-new"))  # Nat1 added, bucket renamed
    new["Resources"]["Role"] = {
        "Type": "AWS::IAM::Role",
        "Properties": {
            "AssumeRolePolicyDocument": {
                "Statement": [
                    {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}
                ]
            },
            "Policies": [
                {
                    "PolicyName": "p",
                    "PolicyDocument": {"Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]},
                }
            ],
        },
    }
    new["Resources"]["Sg"]["Properties"]["SecurityGroupIngress"] = [
        {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "CidrIp": "0.0.0.0/0"}
    ]
    new["Resources"]["Key"]["Properties"]["Description"] = "now described"  # in-place change
    return assembly_dir("old", {"Cluster": old}), assembly_dir("new", {"Cluster": new})


def test_compare_detects_added_removed_replaced(old_and_new, test_prices):
    old_dir, new_dir = old_and_new
    c = compare(load_assembly(old_dir).stacks, load_assembly(new_dir).stacks, old_label="old", prices=test_prices)
    assert {(r.logical_id, r.type) for r in c.of("added")} == {
        ("Nat1", "AWS::EC2::NatGateway"),
        ("Role", "AWS::IAM::Role"),
    }
    assert [(r.logical_id, r.stateful) for r in c.of("removed")] == [("Scratch", True)]
    replaced = c.of("replaced")
    assert [(r.logical_id, r.stateful) for r in replaced] == [("Checkpoints", True)]
    assert replaced[0].detail == "BucketName: ckpt-old → ckpt-new"
    modified = {r.logical_id: r.detail for r in c.of("modified")}
    assert modified["Key"] == "Description"
    assert "Sg" in modified  # a new inline rule changes the group in place


def test_compare_reports_iam_sg_and_cost_changes(old_and_new, test_prices):
    old_dir, new_dir = old_and_new
    c = compare(load_assembly(old_dir).stacks, load_assembly(new_dir).stacks, old_label="old", prices=test_prices)
    assert {(s.actions, s.resources) for s in c.iam_added} == {("sts:AssumeRole", ""), ("s3:*", "*")}
    assert any("⚠ wildcard resource: *" in s.flags for s in c.iam_added)
    assert c.iam_removed == []
    assert [(r.direction, r.ports, r.peer) for r in c.sg_added] == [("ingress", "22", "0.0.0.0/0")]
    assert c.cost_delta == pytest.approx(0.05 * 730)  # one more NAT gateway


def test_identical_assemblies_compare_clean(assembly_dir, cluster_tpl, test_prices):
    a = assembly_dir("a", {"Cluster": cluster_tpl()})
    b = assembly_dir("b", {"Cluster": cluster_tpl()})
    c = compare(load_assembly(a).stacks, load_assembly(b).stacks, old_label="a", prices=test_prices)
    assert c.resources == [] and c.iam_added == c.iam_removed == [] and c.sg_added == [] and c.cost_delta == 0


def test_cli_compare_writes_changes_into_the_report(old_and_new, tmp_path, capsys):
    old_dir, new_dir = old_and_new
    assert main([str(new_dir), "--compare", str(old_dir), "--out", str(tmp_path / "r"), "--no-diagram"]) == 0
    md = (tmp_path / "r" / "test.md").read_text()
    assert "## Changes against" in md
    assert "| ⚠ stateful | replaced | Cluster | Checkpoints | AWS::S3::Bucket | BucketName: ckpt-old → ckpt-new |" in md
    assert "| ⚠ stateful | removed | Cluster | Scratch |" in md
    assert "+2 -1 ~1 replaced" in capsys.readouterr().out


def test_cli_bad_assembly_is_a_clear_error(tmp_path, capsys):
    assert main([str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("review: ") and "no manifest.json" in err and "Traceback" not in err


def _groups_changed(assembly_dir, cluster_tpl, change):
    old = cluster_tpl()
    new = copy.deepcopy(old)
    change({g["InstanceGroupName"]: g for g in new["Resources"]["HyperPod"]["Properties"]["InstanceGroups"]}, new)
    return assembly_dir("old", {"Cluster": old}), assembly_dir("new", {"Cluster": new})


def test_instance_group_changes_hyperpod_documents_are_in_place(assembly_dir, cluster_tpl, test_prices):
    """Instance type, count and lifecycle script are what AWS's update-cluster guide says an
    existing group can change: reported, not flagged."""

    def change(groups, _):
        groups["gpu-workers"]["InstanceType"] = "ml.g6e.12xlarge"
        groups["train-p5"]["InstanceCount"] = 2
        groups["train-p5"]["LifeCycleConfig"] = {"SourceS3Uri": "s3://y/", "OnCreate": "on_create.sh"}

    old_dir, new_dir = _groups_changed(assembly_dir, cluster_tpl, change)
    c = compare(load_assembly(old_dir).stacks, load_assembly(new_dir).stacks, old_label="old", prices=test_prices)
    assert [(g.group, g.change, g.fields, g.risky) for g in c.groups] == [
        ("gpu-workers", "in place", ("InstanceType",), False),
        ("train-p5", "in place", ("InstanceCount", "LifeCycleConfig"), False),
    ]
    assert c.groups[0].detail == "InstanceType: ml.g5.12xlarge → ml.g6e.12xlarge"


def test_instance_group_changes_hyperpod_may_refuse_are_flagged(assembly_dir, cluster_tpl, test_prices, tmp_path):
    """Execution role, threads per core, storage (anything AWS does not document as changeable
    in place) are flagged with what to do instead; a renamed group is a removal and an addition."""

    def change(groups, _):
        groups["gpu-workers"]["ThreadsPerCore"] = 2
        groups["gpu-workers"]["InstanceCount"] = 3
        groups["train-p5"]["ExecutionRole"] = "arn:aws:iam::111111111111:role/other"
        groups["train-p5"]["InstanceGroupName"] = "train-p5-b"

    old_dir, new_dir = _groups_changed(assembly_dir, cluster_tpl, change)
    c = compare(load_assembly(old_dir).stacks, load_assembly(new_dir).stacks, old_label="old", prices=test_prices)
    assert [(g.group, g.change, g.fields, g.risky) for g in c.groups] == [
        ("train-p5-b", "added", (), False),
        ("train-p5", "removed", (), True),
        ("gpu-workers", "may be refused in place", ("InstanceCount", "ThreadsPerCore"), True),
    ]
    assert c.groups[2].detail == (
        "InstanceCount: 2 → 3; ThreadsPerCore: (not set) → 2. AWS documents no in-place change of "
        "ThreadsPerCore on an existing group: add a group with a new name, move the work, then remove this one"
    )
    assert main([str(new_dir), "--compare", str(old_dir), "--out", str(tmp_path / "r"), "--no-diagram"]) == 0
    md = (tmp_path / "r" / "test.md").read_text()
    assert "| ⚠ may be refused in place | may be refused in place | Cluster | HyperPod | gpu-workers |" in md
    assert "| ⚠ removed | removed | Cluster | HyperPod | train-p5 | its nodes are terminated |" in md
