"""boto3 retries and the translation of AWS errors into messages that name the fix."""

from __future__ import annotations

import boto3
import botocore.exceptions as bce
import pytest
from botocore.awsrequest import AWSResponse

from ops.clients.aws import RETRY_MAX_ATTEMPTS, Aws, client_config, iam_action, translate
from ops.errors import AccessDeniedError, CredentialsError, NotFoundError, ThrottledError
from tests.ops.fakes import REGION


def client_error(code: str, message: str, status: int = 400, attempts: int = 0, operation: str = "DescribeVpcs"):
    return bce.ClientError(
        {
            "Error": {"Code": code, "Message": message},
            "ResponseMetadata": {"HTTPStatusCode": status, "RetryAttempts": attempts},
        },
        operation,
    )


@pytest.mark.parametrize(
    ("service", "method", "action"),
    [
        ("service-quotas", "list_service_quotas", "servicequotas:ListServiceQuotas"),
        ("sagemaker", "list_cluster_nodes", "sagemaker:ListClusterNodes"),
        ("eks", "describe_cluster_versions", "eks:DescribeClusterVersions"),
        ("ec2", "describe_availability_zones", "ec2:DescribeAvailabilityZones"),
        ("fsx", "describe_file_systems", "fsx:DescribeFileSystems"),
        ("cloudformation", "describe_stacks", "cloudformation:DescribeStacks"),
    ],
)
def test_iam_action_is_signing_name_and_operation(service, method, action):
    assert iam_action(boto3.client(service, region_name=REGION), method) == action


def test_clients_retry_in_standard_mode_with_ten_attempts(monkeypatch):
    # total_max_attempts counts the first try too (botocore's max_attempts counts only retries).
    assert client_config().retries == {"total_max_attempts": 10, "mode": "standard"}
    client = Aws(REGION).client("ec2")
    assert client.meta.config.retries == {"total_max_attempts": RETRY_MAX_ATTEMPTS, "mode": "standard"}
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "25")
    assert Aws(REGION).client("ec2").meta.config.retries == {"total_max_attempts": 25, "mode": "standard"}


def test_an_html_error_page_becomes_one_short_line():
    html = (
        "<!doctype html>\n<html lang=en>\n<title>500 Internal Server Error</title>\n<h1>Internal Server Error</h1>\n<p>"
        + "x" * 400
        + "</p>"
    )
    err = translate(client_error("500", html, 500), action="servicequotas:ListServiceQuotas", region=REGION)
    assert "\n" not in err.message and "<" not in err.message
    assert err.message.startswith(
        "servicequotas:ListServiceQuotas failed in us-east-1: 500: 500 Internal Server Error Internal Server Error xxx"
    )
    assert len(err.message) < 400


def test_throttled_call_is_retried_then_reported(monkeypatch):
    """A real botocore retry loop: the endpoint answers Throttling every time (served by a
    before-send hook, so no request leaves the process); backoff sleeps are skipped."""
    monkeypatch.setattr("botocore.retries.standard.time.sleep", lambda s: None, raising=False)
    monkeypatch.setattr("time.sleep", lambda s: None)
    aws = Aws(REGION)
    client = aws.client("ec2")
    sent = []

    def throttle(request, **kwargs):
        sent.append(request.url)
        body = b'<?xml version="1.0"?><Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message></Error></Errors><RequestID>x</RequestID></Response>'
        return AWSResponse(request.url, 503, {}, _Raw(body))

    client.meta.events.register("before-send.ec2.DescribeVpcs", throttle)
    with pytest.raises(ThrottledError) as info:
        aws.call("ec2", "describe_vpcs")
    assert len(sent) == RETRY_MAX_ATTEMPTS
    assert info.value.message == (
        "AWS throttled ec2:DescribeVpcs in us-east-1 (RequestLimitExceeded) and it still failed after "
        "10 attempt(s) with exponential backoff"
    )
    assert info.value.exit_code == 3


class _Raw:
    def __init__(self, body: bytes):
        self._body = body

    def stream(self, **kwargs):
        yield self._body


def test_access_denied_names_the_action():
    err = translate(
        client_error("UnauthorizedOperation", "You are not authorized to perform this operation."),
        action="ec2:DescribeVpcs",
        region=REGION,
    )
    assert isinstance(err, AccessDeniedError)
    assert err.action == "ec2:DescribeVpcs"
    assert err.message == (
        "permission denied: the caller may not call ec2:DescribeVpcs in us-east-1 "
        "(UnauthorizedOperation: You are not authorized to perform this operation.)"
    )
    assert err.fix.startswith("allow the IAM action ec2:DescribeVpcs for this role/user")


def test_expired_token_is_a_credentials_problem():
    err = translate(
        client_error("ExpiredToken", "The security token included in the request is expired", 403),
        action="sts:GetCallerIdentity",
        region=REGION,
    )
    assert isinstance(err, CredentialsError)
    assert "aws sso login" in err.fix


def test_missing_credentials_message():
    err = translate(bce.NoCredentialsError(), action="sts:GetCallerIdentity", region=REGION)
    assert isinstance(err, CredentialsError)
    assert err.render().splitlines()[0] == (
        "error: no AWS credentials found (looked in the environment, ~/.aws/credentials, ~/.aws/config, "
        "SSO, container and instance metadata) while calling sts:GetCallerIdentity"
    )


def test_unknown_profile_is_a_credentials_problem():
    with pytest.raises(CredentialsError, match="AWS profile not found: 'nope'"):
        Aws(REGION, profile="nope")


def test_missing_stack_or_cluster_is_not_found():
    assert isinstance(
        translate(
            client_error("ValidationError", "Stack with id CDKToolkit does not exist"),
            action="cloudformation:DescribeStacks",
            region=REGION,
        ),
        NotFoundError,
    )
    assert isinstance(
        translate(
            client_error("ResourceNotFoundException", "No cluster found for name: x."),
            action="eks:DescribeCluster",
            region=REGION,
        ),
        NotFoundError,
    )


def test_unreachable_endpoint():
    err = translate(
        bce.EndpointConnectionError(endpoint_url="https://eks.us-east-1.amazonaws.com/"),
        action="eks:DescribeCluster",
        region=REGION,
    )
    assert err.message.startswith("could not reach the AWS endpoint for eks:DescribeCluster in us-east-1")
