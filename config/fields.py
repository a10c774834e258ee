"""Field types and checks shared by several config sections (one rule, one message)."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated

from pydantic import AfterValidator, Field, WithJsonSchema


def log_retention_days(value: int) -> int:
    """A CloudWatch Logs retention period (the values the API accepts, config/catalog.py)."""
    from config import catalog

    if value not in catalog.LOG_RETENTION_DAYS:
        raise ValueError(
            f"{value} is not a CloudWatch Logs retention period; allowed: "
            + ", ".join(str(d) for d in catalog.LOG_RETENTION_DAYS)
        )
    return value


def cidr_block(value: str) -> str:
    try:
        net = ipaddress.IPv4Network(value, strict=True)
    except (ipaddress.AddressValueError, ipaddress.NetmaskValueError, ValueError) as err:
        raise ValueError(
            f"{value!r} is not a valid IPv4 CIDR block ({err}); expected network/prefix, "
            "e.g. 10.0.0.0/16, with no host bits set"
        ) from None
    return str(net)


Cidr = Annotated[str, Field(description="IPv4 CIDR block, e.g. 10.0.0.0/16")]

AZ_ID_RE = re.compile(r"^[a-z]{2,4}[0-9]-az[0-9]{1,2}$")
ACCOUNT_RE = re.compile(r"^[0-9]{12}$")
REGION_RE = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-[0-9]$")
PREFIX_RE = re.compile(r"^[a-z][a-z0-9-]{1,22}[a-z0-9]$")
IAM_PRINCIPAL_ARN_RE = re.compile(r"^arn:aws[a-z-]*:iam::[0-9]{12}:(role|user)/[\w+=,.@/-]{1,512}$")


def iam_principal_arns(arns: list[str]) -> list[str]:
    """``arns``, each an IAM role or user ARN (EKS access entries take no other principal)."""
    for arn in arns:
        if not IAM_PRINCIPAL_ARN_RE.match(arn):
            raise ValueError(f"{arn!r} is not an IAM role or user ARN; expected arn:aws:iam::123456789012:role/NAME")
    return arns


def _check(pattern: re.Pattern[str], what: str) -> AfterValidator:
    def check(v: str) -> str:
        if not pattern.match(v):
            raise ValueError(f"{v!r} is not {what}")
        return v

    return AfterValidator(check)


# Field types shared by every model that holds such a value (one rule, one message).
# The JSON Schema carries the same pattern, so editors flag a bad value as it is typed.
AzId = Annotated[
    str,
    _check(AZ_ID_RE, "an AZ ID; expected the form use1-az4"),
    WithJsonSchema({"type": "string", "pattern": AZ_ID_RE.pattern}),
]
AccountId = Annotated[
    str,
    _check(ACCOUNT_RE, "an AWS account ID; expected 12 digits (quote it in YAML)"),
    WithJsonSchema({"type": "string", "pattern": ACCOUNT_RE.pattern}),
]
RegionName = Annotated[
    str,
    _check(REGION_RE, "an AWS region name; expected e.g. us-east-1"),
    WithJsonSchema({"type": "string", "pattern": REGION_RE.pattern}),
]

# Kubernetes label keys: optional DNS-subdomain prefix (<=253) + '/' + name (<=63).
_K8S_NAME_RE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")
_DNS_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_K8S_VALUE_RE = re.compile(r"^(([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?)$")


def k8s_key_problem(key: str) -> str | None:
    """Why ``key`` is not a valid Kubernetes label/taint key, or None when it is."""
    prefix, _, name = key.rpartition("/")
    if "/" in key and not prefix:
        return "the prefix before '/' is empty"
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN_RE.match(prefix)):
        return "the prefix must be a DNS subdomain (lowercase alphanumerics, '-', '.'; <= 253 chars)"
    if not name or len(name) > 63 or not _K8S_NAME_RE.match(name):
        return (
            "the name must be 1-63 characters, alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
        )
    return None


def k8s_value_problem(value: str) -> str | None:
    if len(value) > 63 or not _K8S_VALUE_RE.match(value):
        return (
            "a value must be at most 63 characters, alphanumerics, '-', '_' or '.', "
            "starting and ending with an alphanumeric (or empty)"
        )
    return None


def k8s_key(key: str, what: str) -> str:
    """``key``, or a ValueError naming ``what`` (e.g. "taint key") and why it is not a Kubernetes key."""
    problem = k8s_key_problem(key)
    if problem:
        raise ValueError(f"{what} {key!r} is not a valid Kubernetes key: {problem}")
    return key


def k8s_value(value: str, refusal: str) -> str:
    """``value``, or a ValueError that starts with ``refusal`` and says why it is not a Kubernetes value."""
    problem = k8s_value_problem(value)
    if problem:
        raise ValueError(f"{refusal}: {problem}")
    return value
