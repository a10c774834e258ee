"""The day-one check of EKS security groups for pods (docs/security.md): which case holds on this
cluster, from the nodes and the Ray head pods as Kubernetes shows them.

- Every system node has ``vpc.amazonaws.com/pod-eni`` allocatable: the VPC resource controller
  attached a trunk interface to it, so the heads scheduled there can get their branch interfaces.
- No HyperPod node has it: the controller did not attach a trunk to the instances of SageMaker's
  account (if one has it, the controller works there after all: harmless, but not the case the
  docs assume).
- Every running Ray head in the workloads' namespace has the ``vpc.amazonaws.com/pod-eni``
  annotation (its branch interface): without it the head is not in its own security group, so
  the GCS store does not admit it; docs/security.md gives the fallback.

A WARN, not a failure: the platform keeps working, and the fix is a decision (docs/security.md).
"""

from __future__ import annotations

from typing import Any

from ops.reports.checks import PASS, WARN, Check

POD_ENI = "vpc.amazonaws.com/pod-eni"
LABEL = "security groups for pods"
HYPERPOD_COMPUTE_LABEL = "sagemaker.amazonaws.com/compute-type"
FIX = (
    "see docs/security.md, 'Day-one check of security groups for pods' "
    "(ENABLE_POD_ENI, a trunking system instance type, the fallback)"
)


def _name(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", "?"))


def is_hyperpod(node: dict[str, Any]) -> bool:
    labels = (node.get("metadata") or {}).get("labels") or {}
    return labels.get(HYPERPOD_COMPUTE_LABEL) == "hyperpod" or _name(node).startswith("hyperpod-")


def branch_capacity(node: dict[str, Any]) -> int:
    """The node's allocatable branch interfaces (0 where the resource is absent)."""
    value = ((node.get("status") or {}).get("allocatable") or {}).get(POD_ENI)
    try:
        return int(value) if value is not None else 0
    except ValueError:
        return 0


def evaluate_pod_eni(nodes: list[dict[str, Any]], heads: list[dict[str, Any]]) -> Check:
    system = [n for n in nodes if not is_hyperpod(n)]
    hyperpod = [n for n in nodes if is_hyperpod(n)]
    findings = []
    no_trunk = [_name(n) for n in system if branch_capacity(n) == 0]
    if not system:
        findings.append("no system node is registered")
    elif no_trunk:
        findings.append(
            f"system node(s) without {POD_ENI} allocatable (no trunk interface: head pods there get no branch "
            f"interface): {', '.join(no_trunk)}"
        )
    trunked = [_name(n) for n in hyperpod if branch_capacity(n) > 0]
    if trunked:
        findings.append(
            f"HyperPod node(s) with {POD_ENI} allocatable (the controller attached a trunk there after all: "
            f"harmless): {', '.join(trunked)}"
        )
    running = [p for p in heads if (p.get("status") or {}).get("phase") == "Running"]
    bare = [_name(p) for p in running if not ((p.get("metadata") or {}).get("annotations") or {}).get(POD_ENI)]
    if bare:
        findings.append(
            f"Ray head(s) without the {POD_ENI} annotation (no branch interface, not in the heads' security "
            f"group, so the GCS store does not admit them): {', '.join(bare)}"
        )
    if findings:
        return Check(LABEL, WARN, "; ".join(findings), FIX)
    heads_part = (
        f"every running Ray head ({len(running)}) has its branch interface"
        if running
        else "no Ray head is running yet (run status again once one runs)"
    )
    return Check(
        LABEL,
        PASS,
        f"{len(system)} system node(s) with branch interfaces, {len(hyperpod)} HyperPod node(s) without; {heads_part}",
    )
