"""preflight against moto (EC2, STS, CloudFormation) with stubs for the two calls moto lacks."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.stub import Stubber
from moto.core import set_initial_no_auth_action_count

from config import parse_environment, versions
from ops.clients.aws import Aws
from ops.errors import CredentialsError
from ops.reports.checks import FAIL, PASS, WARN
from ops.reports.preflight import (
    evaluate_kubernetes_version,
    evaluate_quotas,
    exit_status,
    quota_name,
    required_instances,
    run_preflight,
)
from tests.ops.fakes import (
    ACCOUNT,
    REGION,
    addon_entry,
    create_bootstrap_stack,
    eks_version,
    env_data,
    healthy_data,
    pinned_addons,
    quota,
    shared_aws,
    stub_eks_versions,
    stub_quotas,
)

G5 = "ml.g5.12xlarge"


def by_check(checks):
    return {c.check: c for c in checks}


@pytest.fixture(scope="module")
def account(shared_moto):
    """One moto account for the module with a current CDK bootstrap stack; tests that need another
    bootstrap state name another stack with ``toolkit_stack``."""
    create_bootstrap_stack(28)
    create_bootstrap_stack(5, name="CDKToolkitOld")


def prepare(config, *, applied=None, defaults=None, versions=None, quota_error=None, addons=None):
    aws = shared_aws()
    stubs = [
        stub_quotas(
            aws,
            applied=[quota(G5, 4, "L-6E1E3A2B")] if applied is None else applied,
            defaults=defaults or [],
            error=quota_error,
        ),
        stub_eks_versions(aws, versions, addons=addons),
    ]
    return aws, stubs


def test_quota_name_is_the_hyperpod_cluster_usage_quota():
    assert quota_name("ml.p5.48xlarge") == "ml.p5.48xlarge for cluster usage"


def test_required_instances_sums_groups_of_one_type():
    data = env_data("prod")
    data["hyperpod"]["instance_groups"].append(
        {"name": "train-p5-b", "instance_type": "ml.p5.48xlarge", "instance_count": 3}
    )
    data["hyperpod"]["instance_groups"].append({"name": "idle", "instance_type": "ml.g5.xlarge", "instance_count": 0})
    assert required_instances(parse_environment(data)) == {
        "ml.g6e.12xlarge": 2,
        "ml.p5.48xlarge": 7,
        "ml.m7i.8xlarge": 2,
    }


def test_healthy_environment_passes_every_check(account, healthy_config):
    aws, stubs = prepare(healthy_config)
    checks = run_preflight(healthy_config, aws)
    for s in stubs:
        s.assert_no_pending_responses()
    rows = by_check(checks)
    assert [c.check for c in checks] == [
        "credentials",
        f"quota {G5}",
        "az use1-az4",
        "az use1-az6",
        f"eks {healthy_config.eks.kubernetes_version}",
        "eks add-ons",
        "cdk bootstrap",
        "vpc cidr overlap",
        "base image digest",
    ]
    assert all(c.status == PASS for c in checks), [c for c in checks if c.status != PASS]
    assert rows[f"quota {G5}"].detail == "'ml.g5.12xlarge for cluster usage' is 4 (applied); configured 2"
    assert rows["az use1-az4"].detail == "use1-az4 is us-east-1d, available"
    assert rows["cdk bootstrap"].detail == "CDKToolkit CREATE_COMPLETE, bootstrap version 28"
    assert rows["credentials"].detail == f"account {ACCOUNT} as arn:aws:sts::{ACCOUNT}:user/moto"
    assert exit_status(checks) == 0


def test_quota_too_low_fails_with_the_increase_command(account, healthy_config):
    aws, _ = prepare(healthy_config, applied=[quota(G5, 1, "L-6E1E3A2B")])
    checks = run_preflight(healthy_config, aws)
    row = by_check(checks)[f"quota {G5}"]
    assert row.status == FAIL
    assert row.detail == "'ml.g5.12xlarge for cluster usage' is 1 (applied); the instance groups need 2"
    assert row.fix == (
        "aws service-quotas request-service-quota-increase --service-code sagemaker "
        "--quota-code L-6E1E3A2B --desired-value 2 --region us-east-1"
    )
    assert exit_status(checks) == 1


def test_quota_falls_back_to_the_aws_default_when_never_changed(account, healthy_config):
    # ListServiceQuotas returns only applied values; a quota never raised is in the defaults.
    aws, _ = prepare(
        healthy_config, applied=[quota("ml.p5.48xlarge", 8, "L-P5")], defaults=[quota(G5, 0, "L-6E1E3A2B")]
    )
    row = by_check(run_preflight(healthy_config, aws))[f"quota {G5}"]
    assert (row.status, row.detail) == (
        FAIL,
        "'ml.g5.12xlarge for cluster usage' is 0 (AWS default); the instance groups need 2",
    )


def test_quota_that_does_not_exist_in_the_region_fails():
    row = evaluate_quotas({"ml.p6-b300.48xlarge": 2}, {}, {}, "eu-north-1")[0]
    assert row.status == FAIL
    assert (
        "no Service Quotas entry named 'ml.p6-b300.48xlarge for cluster usage' (service sagemaker) in eu-north-1"
        in row.detail
    )


def test_missing_az_id_fails_and_lists_the_regions_ids(account):
    data = healthy_data()
    data["network"]["availability_zones"][1] = {"name": "us-east-1a", "id": "use1-az9"}
    config = parse_environment(data)
    aws, _ = prepare(config)
    checks = run_preflight(config, aws)
    row = by_check(checks)["az use1-az9"]
    assert row.status == FAIL
    assert row.detail == (
        "AZ ID use1-az9 (network.availability_zones[1].id) does not exist in us-east-1; this account has: "
        "use1-az1 (us-east-1b), use1-az2 (us-east-1c), use1-az3 (us-east-1e), use1-az4 (us-east-1d), "
        "use1-az5 (us-east-1f), use1-az6 (us-east-1a)"
    )
    assert row.fix == "set network.availability_zones[1].id in config/dev.yaml to one of the region's AZ IDs"
    assert by_check(checks)["az use1-az4"].status == PASS
    assert exit_status(checks) == 1


def test_az_name_that_maps_to_another_id_in_this_account_fails(account):
    # config/dev.yaml as shipped names use1-az4 "us-east-1a"; in this (moto) account it is us-east-1d.
    config = parse_environment(env_data("dev"))
    aws, _ = prepare(config)
    row = by_check(run_preflight(config, aws))["az use1-az4"]
    assert row.status == FAIL
    assert row.detail == "in this account use1-az4 is us-east-1d, but the config names it us-east-1a"
    assert row.fix == "set network.availability_zones[0] to {name: us-east-1d, id: use1-az4} in config/dev.yaml"


def test_kubernetes_version_not_offered_fails(account, healthy_config):
    aws, _ = prepare(
        healthy_config,
        versions=[eks_version("1.33", "STANDARD_SUPPORT", "1.33.5"), eks_version("1.34", "UNSUPPORTED", "1.34.9")],
    )
    assert healthy_config.eks.kubernetes_version == "1.34"
    row = by_check(run_preflight(healthy_config, aws))["eks 1.34"]
    assert (row.status, row.detail) == (FAIL, "EKS does not offer Kubernetes 1.34 in us-east-1; offered: 1.33")


def test_extended_support_warning_says_the_monthly_difference_and_the_upgrade():
    from ops.reports.preflight import extended_support_monthly_extra

    extra = extended_support_monthly_extra()
    assert extra == pytest.approx((0.60 - 0.10) * 730)  # config/prices.yaml: extended vs standard, 730 h
    row = evaluate_kubernetes_version(
        "1.33",
        "us-east-1",
        [
            eks_version("1.33", "EXTENDED_SUPPORT", "1.33.5"),
            eks_version("1.34", "EXTENDED_SUPPORT", "1.34.1"),
            eks_version("1.35", "STANDARD_SUPPORT", "1.35.0"),
        ],
        monthly_extra=extra,
    )
    assert row.status == WARN
    assert row.detail.endswith(
        "(extra per-cluster-hour charge, ends 2027-07-29): $365 a month more than standard support"
    )
    # 1.35 is in standard support but HyperPod does not support it: the next HyperPod minor instead.
    assert row.fix == (
        "no version HyperPod supports is in standard support in this region yet; stay on the newest HyperPod "
        "supports (1.34): hpray upgrade plan --env NAME --to 1.34"
    )


def test_kubernetes_version_hyperpod_does_not_support_fails():
    row = evaluate_kubernetes_version("1.35", "us-east-1", [eks_version("1.35", "STANDARD_SUPPORT", "1.35.0")])
    assert (row.status, row.detail) == (
        FAIL,
        "SageMaker HyperPod does not support Kubernetes 1.35; it supports 1.28, 1.29, 1.30, 1.31, 1.32, 1.33, 1.34",
    )


def test_bootstrap_must_trust_a_cross_account_pipeline(account, healthy_config):
    from tests.ops.fakes import PIPELINE_ACCOUNT

    create_bootstrap_stack(28, name="CDKToolkitUntrusting", trusted=())
    aws, _ = prepare(healthy_config)
    row = by_check(
        run_preflight(healthy_config, aws, toolkit_stack="CDKToolkitUntrusting", pipeline_account=PIPELINE_ACCOUNT)
    )["cdk bootstrap"]
    assert (row.status, row.detail) == (
        FAIL,
        "CDKToolkitUntrusting does not trust the pipeline account 444444444444 (TrustedAccounts: none), so the pipeline cannot deploy here",
    )
    assert row.fix.startswith(
        f"npx cdk bootstrap aws://{ACCOUNT}/us-east-1 --trust 444444444444 --cloudformation-execution-policies "
    )
    aws, _ = prepare(healthy_config)
    row = by_check(run_preflight(healthy_config, aws, pipeline_account=PIPELINE_ACCOUNT))["cdk bootstrap"]
    assert (row.status, row.detail) == (
        PASS,
        "CDKToolkit CREATE_COMPLETE, bootstrap version 28, trusts the pipeline account 444444444444",
    )
    # A pipeline in the environment's own account needs no trust.
    aws, _ = prepare(healthy_config)
    row = by_check(run_preflight(healthy_config, aws, toolkit_stack="CDKToolkitUntrusting", pipeline_account=ACCOUNT))[
        "cdk bootstrap"
    ]
    assert row.status == PASS


def test_kubernetes_version_in_extended_support_warns():
    row = evaluate_kubernetes_version(
        "1.31",
        "us-east-1",
        [eks_version("1.31", "EXTENDED_SUPPORT", "1.31.13"), eks_version("1.32", "STANDARD_SUPPORT", "1.32.9")],
    )
    assert row.status == WARN
    assert (
        row.detail
        == "Kubernetes 1.31 is in extended support in us-east-1 (extra per-cluster-hour charge, ends 2027-07-29)"
    )


def test_missing_bootstrap_stack_fails_with_the_bootstrap_command(account, healthy_config):
    aws, _ = prepare(healthy_config)
    row = by_check(run_preflight(healthy_config, aws, toolkit_stack="CDKToolkitNeverBootstrapped"))["cdk bootstrap"]
    assert (row.status, row.detail, row.fix) == (
        FAIL,
        "no CloudFormation stack 'CDKToolkitNeverBootstrapped' in us-east-1",
        f"npx cdk bootstrap aws://{ACCOUNT}/us-east-1",
    )


def test_old_bootstrap_version_fails(account, healthy_config):
    aws, _ = prepare(healthy_config)
    row = by_check(run_preflight(healthy_config, aws, toolkit_stack="CDKToolkitOld"))["cdk bootstrap"]
    assert (row.status, row.detail) == (FAIL, "CDKToolkitOld is bootstrap version 5; this app needs >= 8")


def test_overlapping_vpc_warns_but_our_own_vpc_does_not(account, healthy_config):
    ec2 = boto3.client("ec2", region_name=REGION)
    other = ec2.create_vpc(
        CidrBlock="10.11.0.0/20",
        TagSpecifications=[{"ResourceType": "vpc", "Tags": [{"Key": "Name", "Value": "legacy"}]}],
    )["Vpc"]["VpcId"]
    ec2.create_vpc(
        CidrBlock="10.10.0.0/16",
        TagSpecifications=[
            {"ResourceType": "vpc", "Tags": [{"Key": "aws:cloudformation:stack-name", "Value": "HprayDevNetwork"}]}
        ],
    )
    aws, _ = prepare(healthy_config)
    try:
        checks = run_preflight(healthy_config, aws)
    finally:  # the module's other tests share this account
        for vpc in ec2.describe_vpcs(Filters=[{"Name": "cidr", "Values": ["10.11.0.0/20", "10.10.0.0/16"]}])["Vpcs"]:
            ec2.delete_vpc(VpcId=vpc["VpcId"])
    row = by_check(checks)["vpc cidr overlap"]
    assert row.status == WARN
    assert row.detail == f"{other} (legacy) 10.11.0.0/20 overlaps network.hyperpod_cidr_blocks[0] 10.11.0.0/16"
    assert exit_status(checks) == 0  # a warning does not fail preflight


def test_credentials_for_another_account_fail(account, healthy_config, monkeypatch):
    monkeypatch.setenv("MOTO_ACCOUNT_ID", "222222222222")
    aws, _ = prepare(healthy_config)
    row = run_preflight(healthy_config, aws)[0]
    assert row.status == FAIL
    assert row.detail.startswith("credentials are for account 222222222222 (arn:aws:sts::222222222222:user/moto)")


def test_missing_permission_names_the_iam_action_and_other_checks_still_run(account, healthy_config):
    aws, _ = prepare(healthy_config, quota_error="AccessDeniedException")
    checks = run_preflight(healthy_config, aws)
    row = by_check(checks)["quotas"]
    assert row.status == FAIL
    assert row.detail.startswith(
        "permission denied: the caller may not call servicequotas:ListServiceQuotas in us-east-1"
    )
    assert row.fix.startswith("allow the IAM action servicequotas:ListServiceQuotas")
    assert by_check(checks)["cdk bootstrap"].status == PASS


def test_throttling_that_outlasts_the_retries_is_reported(account, healthy_config):
    aws, _ = prepare(healthy_config, quota_error="TooManyRequestsException")
    row = by_check(run_preflight(healthy_config, aws))["quotas"]
    assert row.status == FAIL
    assert row.detail.startswith(
        "AWS throttled servicequotas:ListServiceQuotas in us-east-1 (TooManyRequestsException)"
    )


def test_missing_credentials_stop_preflight(no_credentials, healthy_config):
    with pytest.raises(CredentialsError, match=r"no AWS credentials found .* while calling sts:GetCallerIdentity"):
        run_preflight(healthy_config, Aws(REGION))  # a fresh session: no cached credentials


@set_initial_no_auth_action_count(4)  # the 4 IAM calls below run before moto enforces IAM
def test_a_permission_denied_by_moto_iam_names_the_action(account, healthy_config):
    """Not a stub: moto evaluates the caller's IAM policy (Allow *, Deny ec2:DescribeVpcs) and
    answers 403 AccessDenied, as AWS does."""
    iam = boto3.client("iam", region_name=REGION)
    iam.create_user(UserName="ci-preflight")
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": "*", "Resource": "*"},
            {"Effect": "Deny", "Action": "ec2:DescribeVpcs", "Resource": "*"},
        ],
    }
    arn = iam.create_policy(PolicyName="ci-preflight", PolicyDocument=json.dumps(policy))["Policy"]["Arn"]
    iam.attach_user_policy(UserName="ci-preflight", PolicyArn=arn)
    key = iam.create_access_key(UserName="ci-preflight")["AccessKey"]
    session = boto3.Session(
        aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"], region_name=REGION
    )
    aws = Aws(REGION, session=session)
    stub_quotas(aws, applied=[quota(G5, 4, "L-6E1E3A2B")], defaults=[])
    stub_eks_versions(aws)
    checks = by_check(run_preflight(healthy_config, aws))
    row = checks["vpc cidr overlap"]
    assert row.status == FAIL
    assert row.detail == (
        "permission denied: the caller may not call ec2:DescribeVpcs in us-east-1 (AccessDenied: User: "
        f"arn:aws:iam::{ACCOUNT}:user/ci-preflight is not authorized to perform: ec2:DescribeVpcs)"
    )
    assert row.fix.startswith("allow the IAM action ec2:DescribeVpcs")
    assert checks["az use1-az4"].status == PASS and checks["cdk bootstrap"].status == PASS


# ---------------------------------------------------------------------------------------------
# Add-on builds against eks:DescribeAddonVersions for the environment's Kubernetes version
# ---------------------------------------------------------------------------------------------


def test_every_pinned_addon_build_offered_passes_with_the_pins_named(account, healthy_config):
    aws, stubs = prepare(healthy_config)
    rows = by_check(run_preflight(healthy_config, aws))
    stubs[1].assert_no_pending_responses()
    pins = versions.ADDON_VERSIONS["1.34"]
    assert len(pins) == 7
    row = rows["eks add-ons"]
    assert (row.status, row.detail) == (
        PASS,
        "EKS offers every pinned build for Kubernetes 1.34 in us-east-1: "
        + ", ".join(f"{name} {pin}" for name, pin in sorted(pins.items())),
    )


def test_a_pinned_addon_build_eks_does_not_offer_for_the_version_fails_with_the_offered_builds(account, healthy_config):
    """The FSx CSI case of issue 41: the pinned build is not offered for 1.34; the row names the
    add-on, the pin, EKS's builds for 1.34 (newest first) and the edit."""
    addons = [a for a in pinned_addons("1.34") if a["addonName"] != "aws-fsx-csi-driver"]
    addons.append(
        addon_entry(
            "aws-fsx-csi-driver",
            ["v1.6.0-eksbuild.1", "v1.8.0-eksbuild.1", "v1.7.1-eksbuild.2", "v1.7.1-eksbuild.10"],
            "1.34",
            default="v1.7.1-eksbuild.10",
        )
    )
    aws, _ = prepare(healthy_config, addons=addons)
    checks = run_preflight(healthy_config, aws)
    row = by_check(checks)["add-on aws-fsx-csi-driver"]
    pin = versions.ADDON_VERSIONS["1.34"]["aws-fsx-csi-driver"]
    assert pin == "v1.7.0-eksbuild.1"
    assert row.status == FAIL
    assert row.detail == (
        "aws-fsx-csi-driver v1.7.0-eksbuild.1 (pinned for Kubernetes 1.34) is not a build EKS offers for "
        "Kubernetes 1.34 in us-east-1, so CreateAddon would fail and roll the cluster stack back; EKS offers: "
        "v1.8.0-eksbuild.1, v1.7.1-eksbuild.10, v1.7.1-eksbuild.2, v1.6.0-eksbuild.1 (default v1.7.1-eksbuild.10)"
    )
    assert row.fix == (
        "set ADDON_VERSIONS['1.34']['aws-fsx-csi-driver'] in config/versions.py to v1.7.1-eksbuild.10 "
        "(or another offered build), then synth and deploy again"
    )
    rest = by_check(checks)["eks add-ons"]
    assert rest.status == PASS and rest.detail.startswith("EKS offers these pinned builds for Kubernetes 1.34")
    assert "coredns v1.12.4-eksbuild.1" in rest.detail and "aws-fsx-csi-driver" not in rest.detail
    assert exit_status(checks) == 1


def test_an_addon_eks_offers_no_build_of_for_the_version_fails(account, healthy_config):
    addons = [a for a in pinned_addons("1.34") if a["addonName"] != "aws-secrets-store-csi-driver-provider"]
    aws, _ = prepare(healthy_config, addons=addons)
    row = by_check(run_preflight(healthy_config, aws))["add-on aws-secrets-store-csi-driver-provider"]
    assert row.status == FAIL
    assert row.detail.startswith(
        f"aws-secrets-store-csi-driver-provider {versions.SECRETS_STORE_ADDON} (pinned for Kubernetes 1.34): "
        "EKS offers no build of aws-secrets-store-csi-driver-provider for Kubernetes 1.34 in us-east-1"
    )
    assert row.fix.endswith(
        "aws eks describe-addon-versions --kubernetes-version 1.34 --addon-name aws-secrets-store-csi-driver-provider "
        "--region us-east-1 --query 'addons[].addonVersions[].addonVersion'"
    )


def test_addon_builds_of_another_minor_do_not_count_and_builds_sort_by_eksbuild():
    from ops.reports.addons import build_key, parse_offered

    entry = addon_entry("kube-proxy", ["v1.33.3-eksbuild.10"], "1.33")
    entry["addonVersions"] += addon_entry("kube-proxy", ["v1.34.0-eksbuild.2", "v1.34.0-eksbuild.10"], "1.34")[
        "addonVersions"
    ]
    offered = parse_offered([entry], "1.34")["kube-proxy"]
    assert offered.builds == ("v1.34.0-eksbuild.10", "v1.34.0-eksbuild.2")
    assert build_key("v1.20.3-eksbuild.1") > build_key("v1.9.10-eksbuild.3")


def test_a_denied_describe_addon_versions_is_one_fail_row_naming_the_action(account, healthy_config):
    aws = shared_aws()
    stub_quotas(aws, applied=[quota(G5, 4, "L-6E1E3A2B")], defaults=[])
    stubber = Stubber(aws.client("eks"))
    stubber.add_response(
        "describe_cluster_versions", {"clusterVersions": []}, {"clusterType": "eks", "includeAll": True}
    )
    stubber.add_client_error(
        "describe_addon_versions",
        service_error_code="AccessDeniedException",
        service_message="not authorized",
        http_status_code=403,
    )
    stubber.activate()
    row = by_check(run_preflight(healthy_config, aws))["eks add-ons"]
    assert row.status == FAIL
    assert row.detail.startswith("permission denied: the caller may not call eks:DescribeAddonVersions in us-east-1")
    assert row.fix.startswith("allow the IAM action eks:DescribeAddonVersions")
