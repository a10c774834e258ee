"""A small IAM policy evaluator for the subset of the policy language the templates use.

Same-account requests only. The decision follows IAM's policy evaluation logic
(https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html):
an explicit Deny in any applicable policy wins; otherwise the request is allowed when
- KMS: the key policy allows the principal itself, or the key policy allows the account (which
  only delegates to IAM) and an identity policy allows it
  (https://docs.aws.amazon.com/kms/latest/developerguide/key-policy-overview.html);
- S3 and other services with resource policies: an identity policy or the resource policy allows it;
- services without resource policies: an identity policy allows it.

Values are strings already resolved by the caller (``review/flows.py`` resolves CloudFormation
intrinsics); ``*`` and ``?`` in them are IAM wildcards.

Action -> resource-type tables come from parliament's copy of IAM's Service Authorization
Reference (pip package ``parliament``, pinned in requirements.in): :func:`resource_types`.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Decision = Literal["allow", "deny", "implicit-deny"]


@dataclass(frozen=True)
class Principal:
    """Who makes the request: an IAM role (by ARN) or an AWS service principal."""

    arn: str  # role ARN, or the service principal name ("logs.us-east-1.amazonaws.com")
    account: str
    service: bool = False


@dataclass(frozen=True)
class Request:
    principal: Principal
    action: str
    resource: str
    context: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Statement:
    """One statement and where it comes from (for the report: 'Stack/Resource Sid')."""

    source: str
    body: dict[str, Any]

    @property
    def label(self) -> str:
        sid = self.body.get("Sid")
        return f"{self.source}" + (f" [{sid}]" if sid else "")


@dataclass(frozen=True)
class Result:
    decision: Decision
    allowed_by: tuple[str, ...] = ()
    denied_by: tuple[str, ...] = ()
    note: str = ""

    @property
    def allowed(self) -> bool:
        return self.decision == "allow"


def _as_list(v: Any) -> list[Any]:
    if v is None:
        return []
    return v if isinstance(v, list) else [v]


def _glob(pattern: str, value: str, *, case: bool = True) -> bool:
    """IAM wildcard match: ``*`` any run of characters, ``?`` one character, nothing else special."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, 0 if case else re.IGNORECASE | re.DOTALL) is not None


def action_matches(patterns: Iterable[str], action: str) -> bool:
    return any(_glob(p, action, case=False) for p in patterns)


def resource_matches(patterns: Iterable[str], resource: str) -> bool:
    return any(_glob(p, resource) for p in patterns)


# ---------------------------------------------------------------------------------------------
# Conditions (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_condition_operators.html)
# ---------------------------------------------------------------------------------------------


def _string_op(base: str, pattern: str, value: str) -> bool:
    if base in ("StringEquals",):
        return pattern == value
    if base == "StringEqualsIgnoreCase":
        return pattern.lower() == value.lower()
    if base in ("StringLike",):
        return _glob(pattern, value)
    if base in ("ArnEquals", "ArnLike"):
        # ARNs compare per colon-separated field, each with wildcards.
        p_parts, v_parts = pattern.split(":", 5), value.split(":", 5)
        return len(p_parts) == len(v_parts) == 6 and all(_glob(p, v) for p, v in zip(p_parts, v_parts, strict=True))
    if base == "Bool":
        return pattern.lower() == value.lower()
    raise ValueError(f"condition operator {base} is not supported by this evaluator")


_NEGATED = {
    "StringNotEquals": "StringEquals",
    "StringNotLike": "StringLike",
    "ArnNotEquals": "ArnEquals",
    "ArnNotLike": "ArnLike",
    "StringNotEqualsIgnoreCase": "StringEqualsIgnoreCase",
}


def condition_matches(condition: dict[str, Any] | None, context: dict[str, Any]) -> bool:
    """Every operator block and every key in it must match (AND); values of one key are ORed."""
    lowered = {k.lower(): v for k, v in context.items()}
    for operator, block in (condition or {}).items():
        qualifier, _, op = operator.rpartition(":")
        if_exists = op.endswith("IfExists")
        op = op.removesuffix("IfExists")
        for key, expected in block.items():
            present = key.lower() in lowered
            values = [str(v).lower() if isinstance(v, bool) else str(v) for v in _as_list(lowered.get(key.lower()))]
            patterns = [str(p).lower() if isinstance(p, bool) else str(p) for p in _as_list(expected)]
            if op == "Null":
                # "true": the key must be absent; "false": present.
                if (patterns[0].lower() == "true") == present:
                    return False
                continue
            if not present:
                if if_exists:
                    continue
                # A missing key: positive operators fail, negated ones hold.
                if op in _NEGATED:
                    continue
                return False
            negated = op in _NEGATED
            base = _NEGATED.get(op, op)

            def one(v: str, base: str = base, patterns: list[str] = patterns, negated: bool = negated) -> bool:
                hit = any(_string_op(base, p, v) for p in patterns)
                return not hit if negated else hit

            # ForAllValues: every value must match; a single-valued key or ForAnyValue: any one.
            ok = all(one(v) for v in values) if qualifier == "ForAllValues" else any(one(v) for v in values)
            if not ok:
                return False
    return True


# ---------------------------------------------------------------------------------------------
# Statements
# ---------------------------------------------------------------------------------------------


def _principal_kind(statement: dict[str, Any], principal: Principal) -> str | None:
    """How a resource-policy statement's Principal names the requester: 'direct' (the principal
    itself, or '*'), 'account' (the account root: delegation to IAM), or None."""
    if "NotPrincipal" in statement:
        raise ValueError("NotPrincipal is not supported by this evaluator")
    p = statement.get("Principal")
    if p == "*":
        return "direct"
    if not isinstance(p, dict):
        return None
    if principal.service:
        return "direct" if principal.arn in _as_list(p.get("Service")) else None
    kind = None
    for entry in _as_list(p.get("AWS")):
        entry = str(entry)
        if entry == "*" or entry == principal.arn:
            return "direct"
        if entry in (principal.account, f"arn:aws:iam::{principal.account}:root") or re.fullmatch(
            rf"arn:[a-z-]+:iam::{principal.account}:root", entry
        ):
            kind = "account"
    return kind


def statement_applies(body: dict[str, Any], request: Request) -> bool:
    """Action, resource and condition match (the principal is checked by the caller)."""
    if "Action" in body and not action_matches(map(str, _as_list(body["Action"])), request.action):
        return False
    if "NotAction" in body and action_matches(map(str, _as_list(body["NotAction"])), request.action):
        return False
    if "Resource" in body and not resource_matches(map(str, _as_list(body["Resource"])), request.resource):
        return False
    if "NotResource" in body and resource_matches(map(str, _as_list(body["NotResource"])), request.resource):
        return False
    context = {
        "aws:PrincipalArn": request.principal.arn,
        "aws:PrincipalAccount": request.principal.account,
        **request.context,
    }
    return condition_matches(body.get("Condition"), context)


def _matching(
    statements: Iterable[Statement], request: Request, effect: str, *, resource_policy: bool
) -> list[tuple[Statement, str]]:
    """(statement, principal kind) for statements of ``effect`` that apply to ``request``."""
    out: list[tuple[Statement, str]] = []
    for s in statements:
        if s.body.get("Effect") != effect:
            continue
        kind = _principal_kind(s.body, request.principal) if resource_policy else "direct"
        if kind is None:
            continue
        if statement_applies(s.body, request):
            out.append((s, kind))
    return out


def evaluate(
    request: Request,
    *,
    identity: Iterable[Statement] = (),
    resource_policy: Iterable[Statement] | None = None,
    kms: bool = False,
) -> Result:
    """Allow/deny for one same-account request. ``resource_policy`` None: the service has none
    (EC2, FSx, Logs); for KMS it is the key policy and is required."""
    identity = list(identity)
    resource = list(resource_policy or [])
    if kms and resource_policy is None:
        raise ValueError("a KMS request needs the key policy")
    denies = _matching(identity, request, "Deny", resource_policy=False) + _matching(
        resource, request, "Deny", resource_policy=True
    )
    if denies:
        return Result("deny", denied_by=tuple(s.label for s, _ in denies))
    id_allows = [s for s, _ in _matching(identity, request, "Allow", resource_policy=False)]
    res_allows = _matching(resource, request, "Allow", resource_policy=True)
    direct = [s for s, k in res_allows if k == "direct"]
    delegated = [s for s, k in res_allows if k == "account"]
    if kms:
        if direct:
            return Result("allow", allowed_by=tuple(s.label for s in direct))
        if delegated and id_allows:
            return Result("allow", allowed_by=tuple(s.label for s in delegated + id_allows))
        if delegated:
            return Result(
                "implicit-deny",
                note="the key policy only delegates to IAM (account principal) and no identity policy allows it",
            )
        return Result(
            "implicit-deny",
            note="no key-policy statement names this principal"
            + (" (identity policies alone never grant KMS access)" if id_allows else ""),
        )
    allows = id_allows + direct + (delegated if id_allows else [])
    if id_allows or direct:
        return Result("allow", allowed_by=tuple(s.label for s in allows))
    return Result("implicit-deny", note="no identity or resource policy allows it")


# ---------------------------------------------------------------------------------------------
# IAM's action table (parliament's copy of the Service Authorization Reference)
# ---------------------------------------------------------------------------------------------


@functools.cache
def _iam_definition() -> dict[str, dict[str, Any]]:
    # Read parliament's data file without importing the package (its import needs pkg_resources
    # and json-cfg, and parses the file twice).
    spec = importlib.util.find_spec("parliament")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the 'parliament' package (requirements.lock) is not installed; run make deps")
    path = Path(next(iter(spec.submodule_search_locations))) / "iam_definition.json"
    return {s["prefix"]: s for s in json.loads(path.read_text())}


def resource_types(action: str) -> dict[str, bool]:
    """Resource types ``action`` authorizes -> whether the type is required ('*' in IAM's table)."""
    prefix, _, name = action.partition(":")
    service = _iam_definition().get(prefix.lower())
    if service is None:
        raise KeyError(f"{prefix}: no such service in IAM's action table")
    for priv in service["privileges"]:
        if priv["privilege"].lower() == name.lower():
            out = {}
            for r in priv["resource_types"]:
                t = r["resource_type"]
                if t:
                    out[t.rstrip("*")] = t.endswith("*")
            return out
    raise KeyError(f"{action}: no such action in IAM's action table")


def statements_of(document: dict[str, Any] | None, source: str) -> list[Statement]:
    return [Statement(source, s) for s in _as_list((document or {}).get("Statement")) if isinstance(s, dict)]
