"""Prove every flow of the flow table (``constructs/flow_table.py``) against a synthesized
assembly (pure Python over the template JSON; no CDK, no AWS calls): the network and egress checks
in ``review/network_flows.py``, the IAM/KMS checks in ``review/access_flows.py``, the Kubernetes
RBAC checks in ``review/rbac.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from constructs.flow_table import flow_table
from review.access_flows import Iam
from review.assembly import Stack
from review.network_flows import attachments, check_denied, check_egress, check_network, security_group_rules
from review.proof import Env, FlowResult
from review.rbac import check_kube, grants_of

if TYPE_CHECKING:
    from config.environment import EnvironmentConfig


def check_flows(stacks: list[Stack], config: EnvironmentConfig) -> list[FlowResult]:
    """Every flow of the flow table (``constructs/flow_table.py``) for ``config``, proven against ``stacks``."""
    env = Env(stacks)
    table = flow_table(config)
    rules = security_group_rules(env)
    members = attachments(env)
    iam = Iam(env, config)
    grants = {m: grants_of(stacks, m) for m in {f.member for f in table.kube}}
    return (
        [check_network(env, f, rules, members) for f in table.network]
        + [check_egress(env, f, rules, members) for f in table.egress]
        + [iam.check(f) for f in table.access]
        + [check_kube(stacks, f, grants[f.member]) for f in table.kube]
        + [check_denied(f, rules, members) for f in table.denied]
    )


def broken_lines(env_name: str, results: list[FlowResult]) -> list[str]:
    return [
        f"flows: {env_name}: {r.name} ({r.what}) "
        + (
            "is allowed but must not be"
            if r.kind == "denied"
            else "does not hold"
            if ": never " in r.what
            else "is not allowed"
        )
        + f": {r.detail}"
        for r in results
        if not r.ok
    ]
