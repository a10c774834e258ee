"""Every AWS response field the CLI reads exists in the installed botocore service models (moto
and the stubs could not catch a misspelt field name on their own)."""

from __future__ import annotations

import botocore.session
import pytest

READS = [
    ("sagemaker", "DescribeClusterResponse", ["ClusterStatus", "FailureMessage", "InstanceGroups"]),
    (
        "sagemaker",
        "ClusterInstanceGroupDetails",
        ["InstanceGroupName", "InstanceType", "CurrentCount", "TargetCount", "Status"],
    ),
    (
        "sagemaker",
        "ClusterNodeSummary",
        ["InstanceGroupName", "InstanceId", "InstanceType", "LaunchTime", "InstanceStatus"],
    ),
    ("sagemaker", "ClusterInstanceStatusDetails", ["Status", "Message"]),
    ("eks", "Cluster", ["status", "version", "endpoint", "certificateAuthority"]),
    ("eks", "ClusterVersionInformation", ["clusterVersion", "versionStatus", "status", "endOfExtendedSupportDate"]),
    ("fsx", "FileSystem", ["Lifecycle", "StorageCapacity", "DNSName", "FailureDetails"]),
    ("service-quotas", "ServiceQuota", ["QuotaName", "QuotaCode", "Value"]),
    ("ec2", "AvailabilityZone", ["ZoneId", "ZoneName", "State"]),
    ("ec2", "Vpc", ["VpcId", "CidrBlock", "CidrBlockAssociationSet", "Tags"]),
    ("ec2", "VpcCidrBlockAssociation", ["CidrBlock", "CidrBlockState"]),
    ("cloudformation", "Stack", ["StackStatus", "Outputs"]),
    ("cloudformation", "Output", ["OutputKey", "OutputValue"]),
    ("sts", "GetCallerIdentityResponse", ["Account", "Arn"]),
]


@pytest.mark.parametrize(("service", "shape", "fields"), READS, ids=[f"{s}:{sh}" for s, sh, _ in READS])
def test_fields_exist_in_botocore(service, shape, fields):
    model = botocore.session.get_session().get_service_model(service)
    members = model.shape_for(shape).members
    assert [f for f in fields if f not in members] == []


def test_cluster_instance_status_values_the_cli_relies_on():
    model = botocore.session.get_session().get_service_model("sagemaker")
    assert {"Running", "Failure", "Pending"} <= set(model.shape_for("ClusterInstanceStatus").enum)
    assert "InService" in model.shape_for("ClusterStatus").enum
