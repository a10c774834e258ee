"""Compliance gates that run during synth: cdk-nag 3.x rule packs as validation plugins.

Acknowledgements go through :func:`acknowledge` so each one is attached to the narrowest construct,
names the granular finding id and carries a reason.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, App, Validations
from constructs import IConstruct


def register_compliance_checks(app: App) -> None:
    """AwsSolutions and NIST 800-53 rev 5 checks on every stack of ``app``, Stages included."""
    # Imported here: importing cdk_nag loads its assembly into the kernel, and the platform's
    # modules make no kernel call at import (app.py).
    from cdk_nag import AwsSolutionsChecks, NIST80053R5Checks

    Validations.of(app).add_plugins(AwsSolutionsChecks(app), NIST80053R5Checks(app))


def acknowledge(scope: IConstruct, *findings: tuple[str, str]) -> None:
    """Acknowledge cdk-nag findings on ``scope``: each ``(finding_id, reason)``.

    The reason must say why the finding does not apply here, not merely restate the rule.
    """
    for finding_id, reason in findings:
        if len(reason) < 25:
            raise ValueError(f"acknowledgement of {finding_id} needs a real reason, got {reason!r}")
    # One call for all of them: each call is a round trip to the jsii kernel.
    Validations.of(scope).acknowledge(*(Acknowledgment(id=f, reason=r) for f, r in findings))


def checkov_skip(resource: IConstruct, check_id: str, comment: str) -> None:
    """Skip one checkov check on one CloudFormation resource, as resource metadata with a comment.

    ``resource`` is an L2 construct (its default child gets the metadata) or a ``CfnResource``.
    """
    from aws_cdk import CfnResource

    cfn = resource if isinstance(resource, CfnResource) else resource.node.default_child
    if not isinstance(cfn, CfnResource):
        raise TypeError(f"{resource.node.path} has no CloudFormation resource to carry a checkov skip")
    existing = cfn.get_metadata("checkov") or {"skip": []}
    skips = [s for s in existing["skip"] if s["id"] != check_id] + [{"id": check_id, "comment": comment}]
    cfn.add_metadata("checkov", {"skip": skips})


def cfn_lint_ignore(resource: IConstruct, rule_id: str, reason: str) -> None:
    """Ignore one cfn-lint rule on one CloudFormation resource (``Metadata.cfn-lint``), with the
    reason kept beside it under ``Metadata.cfn-lint-reasons`` (the review report lists both)."""
    from aws_cdk import CfnResource

    cfn = resource if isinstance(resource, CfnResource) else resource.node.default_child
    if not isinstance(cfn, CfnResource):
        raise TypeError(f"{resource.node.path} has no CloudFormation resource to carry a cfn-lint ignore")
    if len(reason) < 25:
        raise ValueError(f"cfn-lint ignore of {rule_id} needs a real reason, got {reason!r}")
    existing = cfn.get_metadata("cfn-lint") or {"config": {"ignore_checks": []}}
    checks = sorted(set(existing["config"]["ignore_checks"]) | {rule_id})
    cfn.add_metadata("cfn-lint", {"config": {"ignore_checks": checks}})
    reasons = dict(cfn.get_metadata("cfn-lint-reasons") or {})
    reasons[rule_id] = reason
    cfn.add_metadata("cfn-lint-reasons", dict(sorted(reasons.items())))
