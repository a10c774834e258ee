"""boto3 with retries, and AWS errors turned into messages an operator can act on.

Every AWS call of the CLI goes through :meth:`Aws.call` or :meth:`Aws.paginate`, which know the
service and operation and so can name the exact IAM action a denied call needed.
"""

from __future__ import annotations

import os
import re
from typing import Any

import boto3
import botocore.exceptions as bce
from botocore.config import Config

from ops.errors import AccessDeniedError, AwsError, CredentialsError, NotFoundError, ThrottledError

# botocore's "standard" retry mode: exponential backoff with jitter on throttling, transient and
# 5xx errors. 10 attempts (botocore's default is 3) rides out the bursts of throttling that
# DescribeAvailabilityZones / ListServiceQuotas see when several pipelines preflight at once.
# AWS_MAX_ATTEMPTS (the SDKs' own variable) overrides it.
RETRY_MAX_ATTEMPTS = 10


def client_config() -> Config:
    attempts = os.environ.get("AWS_MAX_ATTEMPTS", "")
    return Config(
        # total_max_attempts counts the first try too (botocore's max_attempts counts retries).
        retries={
            "total_max_attempts": int(attempts) if attempts.isdigit() and int(attempts) > 0 else RETRY_MAX_ATTEMPTS,
            "mode": "standard",
        },
        # Fail fast when an endpoint is unreachable (no route, private-only VPC endpoint) instead
        # of botocore's 60 s default; reads stay at 60 s.
        connect_timeout=10,
        read_timeout=60,
        user_agent_extra="hyperpod-ray-ops",
    )


# Error codes AWS services use for throttling (the same family botocore's retry handler treats as
# throttling; "LimitExceededException" is left out because several services use it for hard
# limits, not rate limits).
THROTTLING_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "RequestThrottled",
        "SlowDown",
        "EC2ThrottledException",
    }
)
ACCESS_DENIED_CODES = frozenset(
    {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "UnauthorizedException", "Forbidden"}
)
# Credentials that AWS rejected (as opposed to none found locally).
BAD_CREDENTIALS_CODES = frozenset(
    {
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "ExpiredTokenException",
        "RequestExpired",
        "InvalidAccessKeyId",
        "AuthFailure",
    }
)
# How each service says "no such resource" to the calls this CLI makes.
NOT_FOUND_CODES = frozenset(
    {"ResourceNotFoundException", "ResourceNotFound", "NoSuchEntity", "FileSystemNotFound", "NoSuchKey"}
)

CREDENTIALS_FIX = (
    "sign in and point the CLI at the account: `aws sso login --profile NAME` then pass "
    "`--profile NAME` (or export AWS_PROFILE=NAME), or export AWS_ACCESS_KEY_ID / "
    "AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN for a role in the environment's account"
)


def iam_action(client: Any, method: str) -> str:
    """The IAM action a boto3 client method needs, e.g. ``servicequotas:ListServiceQuotas``.

    The IAM service prefix is the service's SigV4 signing name for every service this CLI calls
    (sagemaker, eks, ec2, fsx, cloudformation, servicequotas, sts); the action is the API
    operation name.
    """
    model = client.meta.service_model
    operation = client.meta.method_to_api_mapping.get(method, method)
    return f"{model.signing_name}:{operation}"


def translate(err: Exception, *, action: str, region: str) -> AwsError | NotFoundError:
    """Turn a botocore exception from the call ``action`` into an :class:`AwsError`."""
    if isinstance(err, bce.ProfileNotFound):
        return CredentialsError(f"AWS profile not found: {err.kwargs.get('profile')!r}", CREDENTIALS_FIX)
    if isinstance(err, (bce.NoCredentialsError, bce.PartialCredentialsError)):
        return CredentialsError(
            "no AWS credentials found (looked in the environment, ~/.aws/credentials, "
            f"~/.aws/config, SSO, container and instance metadata) while calling {action}",
            CREDENTIALS_FIX,
        )
    if isinstance(err, (bce.CredentialRetrievalError, bce.SSOError, bce.TokenRetrievalError)):
        return CredentialsError(f"AWS credentials could not be loaded: {err}", CREDENTIALS_FIX)
    if isinstance(
        err, (bce.EndpointConnectionError, bce.ConnectTimeoutError, bce.ReadTimeoutError, bce.ConnectionClosedError)
    ):
        return AwsError(
            f"could not reach the AWS endpoint for {action} in {region}: {err}",
            "check network access to AWS (proxy, VPN, VPC endpoints for private networks) and retry",
        )
    if isinstance(err, bce.ClientError):
        error = err.response.get("Error", {})
        code = str(error.get("Code", ""))
        message = _clean(str(error.get("Message", "")))
        status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        attempts = err.response.get("ResponseMetadata", {}).get("RetryAttempts", 0)
        if code in ACCESS_DENIED_CODES or (status == 403 and code not in BAD_CREDENTIALS_CODES):
            return AccessDeniedError(
                f"permission denied: the caller may not call {action} in {region} ({code}: {message})",
                f"allow the IAM action {action} for this role/user (identity policy, and check SCPs "
                "and permission boundaries)",
                action=action,
            )
        if code in BAD_CREDENTIALS_CODES:
            return CredentialsError(f"AWS rejected the credentials for {action} ({code}: {message})", CREDENTIALS_FIX)
        if code in THROTTLING_CODES or status == 429:
            return ThrottledError(
                f"AWS throttled {action} in {region} ({code}) and it still failed after "
                f"{attempts + 1} attempt(s) with exponential backoff",
                "wait a minute and rerun; if it persists, other tools in the account are using "
                "the same API rate (raise AWS_MAX_ATTEMPTS to retry longer)",
            )
        if code in NOT_FOUND_CODES or (
            code in ("ValidationError", "ValidationException")
            and ("does not exist" in message or "Could not find" in message)
        ):
            # CloudFormation and SageMaker answer a missing stack/cluster with a validation error.
            return NotFoundError(f"{action}: {message or code}")
        return AwsError(f"{action} failed in {region}: {code}: {message}")
    if isinstance(err, bce.BotoCoreError):
        return AwsError(f"{action} failed in {region}: {err}")
    raise err


def _clean(message: str) -> str:
    """One short line: a proxy or non-AWS endpoint can answer with an HTML page."""
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", message)).strip()
    return text if len(text) <= 300 else text[:297] + "..."


class Aws:
    """One boto3 session for one environment's account and region, clients cached."""

    def __init__(self, region: str, *, profile: str | None = None, session: boto3.Session | None = None):
        self.region = region
        try:
            self.session = session or boto3.Session(profile_name=profile, region_name=region)
        except bce.BotoCoreError as err:
            raise translate(err, action="loading the AWS profile", region=region) from None
        self._clients: dict[str, Any] = {}

    def client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = self.session.client(service, region_name=self.region, config=client_config())
        return self._clients[service]

    def call(self, service: str, method: str, **params: Any) -> dict[str, Any]:
        client = self.client(service)
        try:
            return getattr(client, method)(**params)
        except (bce.BotoCoreError, bce.ClientError) as err:
            raise translate(err, action=iam_action(client, method), region=self.region) from None

    def paginate(self, service: str, method: str, result_key: str, **params: Any) -> list[dict[str, Any]]:
        """Every item of ``result_key`` over all pages."""
        client = self.client(service)
        items: list[dict[str, Any]] = []
        try:
            for page in client.get_paginator(method).paginate(**params):
                items.extend(page.get(result_key, []))
        except (bce.BotoCoreError, bce.ClientError) as err:
            raise translate(err, action=iam_action(client, method), region=self.region) from None
        return items
