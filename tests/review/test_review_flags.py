"""A real CDK test stack with a deliberate wildcard IAM statement, an open security group and an
unencrypted bucket: the report must flag all three (and not flag the compliant neighbours)."""

from __future__ import annotations

import pytest

from review import analysis
from review.__main__ import main
from review.assembly import load_assembly


@pytest.fixture(scope="module")
def bad_assembly(tmp_path_factory):
    import aws_cdk as cdk
    from aws_cdk import aws_ec2 as ec2
    from aws_cdk import aws_iam as iam
    from aws_cdk import aws_s3 as s3

    out = tmp_path_factory.mktemp("bad-cdk-out")
    app = cdk.App(outdir=str(out))
    stack = cdk.Stack(app, "Deliberate", env=cdk.Environment(account="111111111111", region="us-east-1"))
    role = iam.Role(stack, "Role", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"))
    role.add_to_policy(iam.PolicyStatement(actions=["s3:*"], resources=["*"]))
    role.add_to_policy(
        iam.PolicyStatement(actions=["sqs:SendMessage"], resources=["arn:aws:sqs:us-east-1:111111111111:one"])
    )
    vpc = ec2.Vpc(
        stack,
        "Vpc",
        max_azs=2,
        nat_gateways=0,
        subnet_configuration=[ec2.SubnetConfiguration(name="Isolated", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)],
    )
    open_sg = ec2.SecurityGroup(stack, "OpenSg", vpc=vpc, description="deliberately open")
    open_sg.add_ingress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(22), "ssh from anywhere")
    open_sg.add_ingress_rule(ec2.Peer.ipv4("10.0.0.0/8"), ec2.Port.tcp(443), "internal https")
    bucket = s3.Bucket(stack, "Plain")
    bucket.node.default_child.add_property_deletion_override("BucketEncryption")  # type: ignore[union-attr]
    s3.Bucket(
        stack,
        "Encrypted",
        encryption=s3.BucketEncryption.KMS_MANAGED,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
    )
    app.synth()
    return out


def test_wildcard_iam_statement_is_flagged(bad_assembly):
    stack = load_assembly(bad_assembly).stack("Deliberate")
    statements = analysis.iam_statements(stack)
    wild = [s for s in statements if s.actions == "s3:*"]
    assert len(wild) == 1
    assert "⚠ wildcard action: whole service" in wild[0].flags
    assert "⚠ wildcard resource: *" in wild[0].flags
    scoped = [s for s in statements if s.actions == "sqs:SendMessage"]
    assert scoped and scoped[0].flags == ()


def test_open_security_group_is_flagged_and_internet_reachable(bad_assembly):
    stack = load_assembly(bad_assembly).stack("Deliberate")
    rules = analysis.security_group_rules(stack)
    ssh = [r for r in rules if r.ports == "22"]
    assert len(ssh) == 1 and ssh[0].peer == "0.0.0.0/0"
    assert "⚠ open to the internet" in ssh[0].flags
    internal = [r for r in rules if r.ports == "443"]
    assert internal and internal[0].flags == ()
    exposed = [x for x in analysis.internet_exposure(stack) if x.flagged]
    assert any("tcp 22 from 0.0.0.0/0" in x.what for x in exposed)


def test_unencrypted_bucket_is_flagged(bad_assembly):
    stack = load_assembly(bad_assembly).stack("Deliberate")
    by_resource = {e.resource: e for e in analysis.encryption_status(stack) if e.type == "AWS::S3::Bucket"}
    plain = next(e for lid, e in by_resource.items() if lid.startswith("Plain"))
    assert plain.flags == ("⚠ unencrypted bucket (no BucketEncryption)",)
    encrypted = next(e for lid, e in by_resource.items() if lid.startswith("Encrypted"))
    assert encrypted.status == "SSE-KMS" and encrypted.flags == ("⚠ AWS-managed key",)


def test_report_files_show_the_flags(bad_assembly, tmp_path):
    assert main([str(bad_assembly), "--out", str(tmp_path), "--no-diagram"]) == 0
    md = (tmp_path / "Deliberate.md").read_text()
    html = (tmp_path / "Deliberate.html").read_text()
    for text in ("⚠ wildcard resource: *", "⚠ open to the internet", "⚠ unencrypted bucket"):
        assert text in md
    assert '<tr class="flagged">' in html
    assert '<span class="flag">⚠</span> unencrypted bucket' in html
    assert "IAM statements: 3, flagged: 1" in md  # trust policy + two statements
