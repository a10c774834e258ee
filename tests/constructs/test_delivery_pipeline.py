"""Acknowledgements of CDK Pipelines' generated findings: granular, reasoned, and only for the
statements they are meant for (anything else still fails synth)."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import Validations
from aws_cdk import aws_iam as iam

from constructs.delivery_pipeline import _acknowledge_wildcards


def _acks(policy: iam.CfnPolicy) -> dict[str, str]:
    out: dict[str, str] = {}
    for entry in policy.node.metadata:
        if entry.type == Validations.ACKNOWLEDGED_RULES_METADATA_KEY:
            out.update({k.split("::", 1)[-1]: v for k, v in entry.data.items()})
    return out


def _policy(*statements: dict) -> iam.CfnPolicy:
    stack = cdk.Stack(cdk.App(), "S", env=cdk.Environment(account="444444444444", region="us-east-1"))
    bucket = cdk.CfnResource(stack, "ArtifactsBucket", type="AWS::S3::Bucket")
    doc = {
        "Version": "2012-10-17",
        "Statement": [
            {
                **st,
                "Resource": [
                    r.replace("BUCKET", bucket.get_att("Arn").to_string()) if isinstance(r, str) else r
                    for r in st["Resource"]
                ],
            }
            for st in statements
        ],
    }
    return iam.CfnPolicy(stack, "Policy", policy_document=doc, policy_name="p")


def test_artifact_bucket_wildcards_are_acknowledged_granularly():
    policy = _policy(
        {"Effect": "Allow", "Action": ["s3:GetObject*", "s3:PutObject"], "Resource": ["BUCKET", "BUCKET/*"]}
    )
    _acknowledge_wildcards(policy)
    acks = _acks(policy)
    assert set(acks) == {
        "AwsSolutions-IAM5[Action::s3:GetObject*]",
        "AwsSolutions-IAM5[Resource::<ArtifactsBucket.Arn>/*]",
    }
    assert all("artifact bucket" in reason for reason in acks.values())


def test_wildcards_on_other_buckets_or_services_stay_findings():
    policy = _policy(
        {"Effect": "Allow", "Action": ["s3:GetObject*"], "Resource": ["arn:aws:s3:::someone-elses-bucket/*"]},
        {"Effect": "Allow", "Action": ["ec2:*"], "Resource": ["*"]},
    )
    _acknowledge_wildcards(policy)
    assert _acks(policy) == {}


def test_codebuild_log_group_wildcards_get_the_codebuild_reason():
    policy = _policy(
        {
            "Effect": "Allow",
            "Action": ["logs:CreateLogStream"],
            "Resource": ["arn:aws:logs:us-east-1:444444444444:log-group:/aws/codebuild/Proj:*"],
        }
    )
    _acknowledge_wildcards(policy)
    acks = _acks(policy)
    assert list(acks) == [
        "AwsSolutions-IAM5[Resource::arn:aws:logs:us-east-1:444444444444:log-group:/aws/codebuild/Proj:*]"
    ]
    assert "CodeBuild creates its log streams" in next(iter(acks.values()))
