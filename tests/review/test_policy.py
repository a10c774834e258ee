"""The IAM evaluator (review/policy.py) on cases taken from AWS's documentation."""

from __future__ import annotations

import pytest

from review.policy import Principal, Request, Statement, condition_matches, evaluate, resource_types

ACCOUNT = "111122223333"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/ExampleRole"
KEY = f"arn:aws:kms:us-east-2:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"
ME = Principal(ROLE, ACCOUNT)


def st(**body) -> Statement:
    return Statement("test", body)


# KMS default key policy: "Allows access to the AWS account and enables IAM policies"
# (https://docs.aws.amazon.com/kms/latest/developerguide/key-policy-default.html).
ROOT_STATEMENT = st(
    Sid="Enable IAM User Permissions",
    Effect="Allow",
    Principal={"AWS": f"arn:aws:iam::{ACCOUNT}:root"},
    Action="kms:*",
    Resource="*",
)
IAM_DECRYPT = st(Effect="Allow", Action=["kms:Decrypt"], Resource=KEY)


def test_kms_root_principal_only_delegates_to_iam():
    # "It does not by itself give any IAM users or roles access to the KMS key" (same page).
    req = Request(ME, "kms:Decrypt", KEY)
    assert evaluate(req, resource_policy=[ROOT_STATEMENT], kms=True).decision == "implicit-deny"
    allowed = evaluate(req, identity=[IAM_DECRYPT], resource_policy=[ROOT_STATEMENT], kms=True)
    assert allowed.allowed and len(allowed.allowed_by) == 2


def test_kms_identity_policy_alone_never_grants():
    # "No AWS principal ... has any permissions to a KMS key unless that permission is explicitly
    # allowed in a key policy" (KMS developer guide, key policies).
    other = st(Effect="Allow", Principal={"AWS": f"arn:aws:iam::{ACCOUNT}:role/Other"}, Action="kms:*", Resource="*")
    assert not evaluate(
        Request(ME, "kms:Decrypt", KEY), identity=[IAM_DECRYPT], resource_policy=[other], kms=True
    ).allowed


def test_kms_key_policy_naming_the_principal_is_enough():
    direct = st(Effect="Allow", Principal={"AWS": ROLE}, Action=["kms:Decrypt", "kms:GenerateDataKey*"], Resource="*")
    assert evaluate(Request(ME, "kms:GenerateDataKeyWithoutPlaintext", KEY), resource_policy=[direct], kms=True).allowed


def test_kms_account_principal_with_principal_arn_condition_is_still_delegation():
    # The shape fault 5 had: account root + aws:PrincipalArn does not name the role itself.
    slr = f"arn:aws:iam::{ACCOUNT}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-1"
    stmt = st(
        Effect="Allow",
        Principal={"AWS": f"arn:aws:iam::{ACCOUNT}:root"},
        Action="kms:Decrypt",
        Resource="*",
        Condition={
            "ArnLike": {
                "aws:PrincipalArn": f"arn:aws:iam::{ACCOUNT}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/*"
            }
        },
    )
    assert not evaluate(Request(Principal(slr, ACCOUNT), "kms:Decrypt", KEY), resource_policy=[stmt], kms=True).allowed
    star = st(**{**stmt.body, "Principal": {"AWS": "*"}})
    assert evaluate(Request(Principal(slr, ACCOUNT), "kms:Decrypt", KEY), resource_policy=[star], kms=True).allowed
    other = Principal(f"arn:aws:iam::{ACCOUNT}:role/Other", ACCOUNT)
    assert not evaluate(Request(other, "kms:Decrypt", KEY), resource_policy=[star], kms=True).allowed


def test_kms_via_service_condition():
    # kms:ViaService example (KMS developer guide, condition keys): only through the named service.
    stmt = st(
        Effect="Allow",
        Principal={"AWS": ROLE},
        Action="kms:Decrypt",
        Resource="*",
        Condition={"StringEquals": {"kms:ViaService": ["ec2.us-west-2.amazonaws.com", "rds.us-west-2.amazonaws.com"]}},
    )
    assert evaluate(
        Request(ME, "kms:Decrypt", KEY, {"kms:ViaService": "rds.us-west-2.amazonaws.com"}),
        resource_policy=[stmt],
        kms=True,
    ).allowed
    assert not evaluate(
        Request(ME, "kms:Decrypt", KEY, {"kms:ViaService": "s3.us-west-2.amazonaws.com"}),
        resource_policy=[stmt],
        kms=True,
    ).allowed
    assert not evaluate(Request(ME, "kms:Decrypt", KEY), resource_policy=[stmt], kms=True).allowed


def test_explicit_deny_wins_over_allow():
    # S3 "Enforce encryption in transit" bucket policy (aws:SecureTransport false -> Deny).
    bucket = "arn:aws:s3:::amzn-s3-demo-bucket"
    deny = st(
        Effect="Deny",
        Principal={"AWS": "*"},
        Action="s3:*",
        Resource=[bucket, f"{bucket}/*"],
        Condition={"Bool": {"aws:SecureTransport": "false"}},
    )
    allow = st(Effect="Allow", Action="s3:GetObject", Resource=f"{bucket}/*")
    insecure = evaluate(
        Request(ME, "s3:GetObject", f"{bucket}/a", {"aws:SecureTransport": "false"}),
        identity=[allow],
        resource_policy=[deny],
    )
    assert insecure.decision == "deny" and insecure.denied_by == ("test",)
    assert evaluate(
        Request(ME, "s3:GetObject", f"{bucket}/a", {"aws:SecureTransport": "true"}),
        identity=[allow],
        resource_policy=[deny],
    ).allowed


def test_same_account_s3_identity_or_bucket_policy():
    bucket = "arn:aws:s3:::amzn-s3-demo-bucket"
    by_bucket = st(Effect="Allow", Principal={"AWS": ROLE}, Action="s3:GetObject", Resource=f"{bucket}/*")
    assert evaluate(Request(ME, "s3:GetObject", f"{bucket}/x"), resource_policy=[by_bucket]).allowed
    assert not evaluate(Request(ME, "s3:PutObject", f"{bucket}/x"), resource_policy=[by_bucket]).allowed


def test_s3_prefix_condition_on_list_bucket():
    # "Limit listing to a folder" (S3 user guide, bucket policy examples: s3:prefix with StringLike).
    stmt = st(
        Effect="Allow",
        Action="s3:ListBucket",
        Resource="arn:aws:s3:::b",
        Condition={"StringLike": {"s3:prefix": ["home/", "home/*"]}},
    )
    assert evaluate(Request(ME, "s3:ListBucket", "arn:aws:s3:::b", {"s3:prefix": "home/x/"}), identity=[stmt]).allowed
    assert not evaluate(
        Request(ME, "s3:ListBucket", "arn:aws:s3:::b", {"s3:prefix": "models/"}), identity=[stmt]
    ).allowed
    assert not evaluate(Request(ME, "s3:ListBucket", "arn:aws:s3:::b"), identity=[stmt]).allowed


@pytest.mark.parametrize(
    ("condition", "context", "expected"),
    [
        # A missing key: positive operators fail, negated ones hold (IAM user guide, condition operators).
        ({"StringEquals": {"aws:PrincipalTag/team": "ml"}}, {}, False),
        ({"StringNotEquals": {"aws:PrincipalTag/team": "ml"}}, {}, True),
        ({"StringEqualsIfExists": {"ec2:InstanceType": "t3.micro"}}, {}, True),
        ({"StringEqualsIfExists": {"ec2:InstanceType": "t3.micro"}}, {"ec2:InstanceType": "m5.large"}, False),
        ({"Null": {"aws:TagKeys": "true"}}, {}, True),
        ({"Null": {"aws:TagKeys": "false"}}, {}, False),
        # Multivalued keys (IAM user guide, "Set operators for multivalued context keys").
        ({"ForAnyValue:StringEquals": {"aws:TagKeys": ["a", "b"]}}, {"aws:TagKeys": ["b", "c"]}, True),
        ({"ForAllValues:StringEquals": {"aws:TagKeys": ["a", "b"]}}, {"aws:TagKeys": ["b", "c"]}, False),
        ({"ForAllValues:StringEquals": {"aws:TagKeys": ["a", "b"]}}, {"aws:TagKeys": ["a"]}, True),
        # Keys are case-insensitive, String values case-sensitive; ArnLike matches per ARN field.
        (
            {"StringEquals": {"KMS:VIASERVICE": "s3.us-east-1.amazonaws.com"}},
            {"kms:ViaService": "s3.us-east-1.amazonaws.com"},
            True,
        ),
        (
            {"StringEquals": {"kms:ViaService": "S3.us-east-1.amazonaws.com"}},
            {"kms:ViaService": "s3.us-east-1.amazonaws.com"},
            False,
        ),
        ({"ArnLike": {"aws:SourceArn": "arn:aws:s3:::b*"}}, {"aws:SourceArn": "arn:aws:s3:::bucket"}, True),
        (
            {"ArnEquals": {"ec2:Subnet": ["arn:aws:ec2:r:1:subnet/a"]}},
            {"ec2:Subnet": "arn:aws:ec2:r:1:subnet/b"},
            False,
        ),
        ({"Bool": {"kms:GrantIsForAWSResource": "true"}}, {"kms:GrantIsForAWSResource": True}, True),
        # Two operators and two keys: all must hold.
        ({"StringEquals": {"a": "1"}, "StringLike": {"b": "x*"}}, {"a": "1", "b": "y"}, False),
    ],
)
def test_condition_operators(condition, context, expected):
    assert condition_matches(condition, context) is expected


def test_service_principal_trust_policy():
    trust = [
        st(Effect="Allow", Principal={"Service": "pods.eks.amazonaws.com"}, Action=["sts:AssumeRole", "sts:TagSession"])
    ]
    pods = Principal("pods.eks.amazonaws.com", ACCOUNT, service=True)
    assert evaluate(Request(pods, "sts:TagSession", ROLE), resource_policy=trust).allowed
    ec2 = Principal("ec2.amazonaws.com", ACCOUNT, service=True)
    assert not evaluate(Request(ec2, "sts:AssumeRole", ROLE), resource_policy=trust).allowed


def test_not_action_and_wildcards():
    stmt = st(Effect="Allow", NotAction="iam:*", Resource="*")
    assert evaluate(Request(ME, "s3:GetObject", "arn:aws:s3:::b/k"), identity=[stmt]).allowed
    assert not evaluate(Request(ME, "iam:PassRole", ROLE), identity=[stmt]).allowed


def test_action_resource_types_from_iam_table():
    # Service Authorization Reference for EC2 (parliament's copy): required types end in '*'.
    assert resource_types("ec2:DetachNetworkInterface") == {"instance": True, "network-interface": True}
    modify = resource_types("ec2:ModifyNetworkInterfaceAttribute")
    assert modify["network-interface"] and {"instance", "security-group"} <= set(modify)
    assert resource_types("kms:CreateGrant") == {"key": True}
    with pytest.raises(KeyError, match="no such action"):
        resource_types("ec2:NoSuchAction")
