"""The IAM actions each command calls (read-only), for the operator's role policy.

tests/ops/test_ops_permissions.py records the calls the commands actually make and checks them
against these lists, so the lists (and the README table) cannot drift from the code.
"""

PREFLIGHT = (
    "sts:GetCallerIdentity",
    "servicequotas:ListServiceQuotas",
    "servicequotas:ListAWSDefaultServiceQuotas",
    "ec2:DescribeAvailabilityZones",
    "eks:DescribeClusterVersions",
    "cloudformation:DescribeStacks",
    "ec2:DescribeVpcs",
)
STATUS = (
    "sts:GetCallerIdentity",
    "sagemaker:DescribeCluster",
    "sagemaker:ListClusterNodes",
    "eks:DescribeCluster",
    "cloudformation:DescribeStacks",
    "fsx:DescribeFileSystems",
)
# status and submit reach Kubernetes with an EKS token (a presigned sts:GetCallerIdentity, which
# needs no permission) after eks:DescribeCluster; Kubernetes access comes from an EKS access entry.
SUBMIT = ("eks:DescribeCluster",)
