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
