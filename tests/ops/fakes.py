"""Thin fakes at the boto3-client boundary for the calls moto 5.2.5 does not implement, and
realistic API payloads.

- Service Quotas: moto implements ListAWSDefaultServiceQuotas / GetServiceQuota for service code
  ``vpc`` only, and not ListServiceQuotas at all; the ``sagemaker`` quotas are stubbed.
- EKS DescribeClusterVersions: not in moto; stubbed.

The stubs are botocore ``Stubber``s on the very client the CLI uses, so requests are checked
against the real service model (parameter names and types), and responses against its output
shape; every other call of the test still goes to moto.
"""

from __future__ import annotations

from typing import Any

from botocore.stub import Stubber

import yaml

from config.loader import CONFIG_DIR

# The dev environment's account: moto answers as this account (MOTO_ACCOUNT_ID, set in conftest).
ACCOUNT = "111111111111"
REGION = "us-east-1"


def quota(instance_type: str, value: float, code: str) -> dict[str, Any]:
    # QuotaCode values are placeholders in the L-XXXXXXXX format; the real codes differ per quota.
    name = f"{instance_type} for cluster usage"
    return {
        "ServiceCode": "sagemaker",
        "ServiceName": "Amazon SageMaker",
        "QuotaArn": f"arn:aws:servicequotas:{REGION}:{ACCOUNT}:sagemaker/{code}",
        "QuotaCode": code,
        "QuotaName": name,
        "Value": value,
        "Unit": "None",
        "Adjustable": True,
        "GlobalQuota": False,
    }


def stub_quotas(aws, *, applied: list[dict], defaults: list[dict], error: str | None = None) -> Stubber:
    stubber = Stubber(aws.client("service-quotas"))
    if error:
        stubber.add_client_error(
            "list_service_quotas",
            service_error_code=error,
            service_message={
                "AccessDeniedException": f"User: arn:aws:iam::{ACCOUNT}:user/ci is not authorized to perform: "
                "servicequotas:ListServiceQuotas",
                "TooManyRequestsException": "Rate exceeded",
            }.get(error, error),
            http_status_code={"AccessDeniedException": 400, "TooManyRequestsException": 400}.get(error, 400),
            expected_params={"ServiceCode": "sagemaker"},
        )
    else:
        stubber.add_response("list_service_quotas", {"Quotas": applied}, {"ServiceCode": "sagemaker"})
        stubber.add_response("list_aws_default_service_quotas", {"Quotas": defaults}, {"ServiceCode": "sagemaker"})
    stubber.activate()
    return stubber


def eks_version(version: str, status: str, patch: str) -> dict[str, Any]:
    return {
        "clusterVersion": version,
        "clusterType": "eks",
        "defaultPlatformVersion": "eks.10",
        "defaultVersion": False,
        "releaseDate": "2025-05-29T00:00:00Z",
        "endOfStandardSupportDate": "2026-07-29T00:00:00Z",
        "endOfExtendedSupportDate": "2027-07-29T00:00:00Z",
        "status": status.lower().replace("_", "-"),
        "versionStatus": status,
        "kubernetesPatchVersion": patch,
    }


DEFAULT_EKS_VERSIONS = [
    eks_version("1.31", "EXTENDED_SUPPORT", "1.31.13"),
    eks_version("1.32", "STANDARD_SUPPORT", "1.32.9"),
    eks_version("1.33", "STANDARD_SUPPORT", "1.33.5"),
    eks_version("1.34", "STANDARD_SUPPORT", "1.34.1"),
]


def stub_eks_versions(aws, versions: list[dict] | None = None) -> Stubber:
    stubber = Stubber(aws.client("eks"))
    stubber.add_response(
        "describe_cluster_versions",
        {"clusterVersions": DEFAULT_EKS_VERSIONS if versions is None else versions},
        {"clusterType": "eks", "includeAll": True},
    )
    stubber.activate()
    return stubber


def create_bootstrap_stack(version: int = 28, name: str = "CDKToolkit") -> None:
    """A CDKToolkit stack in moto with the BootstrapVersion output that `cdk bootstrap` creates."""
    import json

    import boto3

    template = {
        "Resources": {"CdkBootstrapVersion": {"Type": "AWS::SSM::Parameter", "Properties": {"Type": "String", "Name": "/cdk-bootstrap/hnb659fds/version", "Value": str(version)}}},
        "Outputs": {"BootstrapVersion": {"Value": str(version)}},
    }
    boto3.client("cloudformation", region_name=REGION).create_stack(StackName=name, TemplateBody=json.dumps(template))


def env_data(name: str = "dev") -> dict[str, Any]:
    data = yaml.safe_load((CONFIG_DIR / f"{name}.yaml").read_text())
    data.setdefault("name", name)
    return data


# moto's us-east-1 maps us-east-1a -> use1-az6, us-east-1b -> use1-az1, us-east-1d -> use1-az4
# (as a real account would, with its own mapping). The dev config pins use1-az4 and use1-az6 by ID;
# this is dev with the names this "account" gives those IDs.
def healthy_data() -> dict[str, Any]:
    data = env_data("dev")
    data["network"]["availability_zones"] = [
        {"name": "us-east-1d", "id": "use1-az4"},
        {"name": "us-east-1a", "id": "use1-az6"},
    ]
    return data


