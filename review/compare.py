"""Diff two cloud assemblies: resources added, removed, replaced (a create-only property or
the type changed) or modified; IAM statements and security-group rules added or removed; cost."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from config.prices import PriceTable
from review.analysis import (
    IamStatement,
    SgRule,
    create_only_properties,
    iam_statements,
    is_stateful,
    pointer_value,
    security_group_rules,
    show,
)
from review.assembly import Stack
from review.cost import CostEstimate, estimate


@dataclass(frozen=True)
class ResourceChange:
    stack: str
    logical_id: str
    type: str
    change: str  # added | removed | replaced | modified
    detail: str
    stateful: bool


# What AWS documents as changeable on an existing HyperPod instance group. SageMaker developer
# guide, "Updating SageMaker HyperPod cluster configuration" (update-cluster): "For each instance
# group, you can change the instance type, the number of instances, the lifecycle configuration
# entrypoint script, and the path to the script". The API reference (ClusterInstanceGroupSpecification)
# adds: MinInstanceCount rolls back to "previous settings for existing instance groups",
# OnStartDeepHealthChecks run when a group "is created or updated", and KubernetesConfig labels and
# taints are reconciled to the declared state. Every other field of an existing group (execution
# role, threads per core, storage, subnets, training plan, image...) is documented nowhere as
# changeable: HyperPod may refuse it, which fails the stack update and rolls it back.
HYPERPOD_GROUP_IN_PLACE = frozenset(
    {
        "InstanceType",
        "InstanceCount",
        "LifeCycleConfig",
        "MinInstanceCount",
        "OnStartDeepHealthChecks",
        "KubernetesConfig",
    }
)
MAY_BE_REFUSED = "may be refused in place"


@dataclass(frozen=True)
class GroupChange:
    """One change of one HyperPod instance group between two synths."""

    stack: str
    logical_id: str
    group: str
    change: str  # added | removed | in place | may be refused in place
    fields: tuple[str, ...]
    detail: str

    @property
    def risky(self) -> bool:
        return self.change in ("removed", MAY_BE_REFUSED)


def hyperpod_group_changes(stack: str, logical_id: str, old: dict[str, Any], new: dict[str, Any]) -> list[GroupChange]:
    """The instance-group changes of one ``AWS::SageMaker::Cluster``, by group name: a renamed
    group is one removed (its nodes are terminated) and one added."""
    old_groups = {show(g.get("InstanceGroupName")): g for g in old.get("InstanceGroups") or []}
    new_groups = {show(g.get("InstanceGroupName")): g for g in new.get("InstanceGroups") or []}
    out: list[GroupChange] = []
    for name in sorted(set(new_groups) - set(old_groups)):
        out.append(GroupChange(stack, logical_id, name, "added", (), "new nodes"))
    for name in sorted(set(old_groups) - set(new_groups)):
        out.append(GroupChange(stack, logical_id, name, "removed", (), "its nodes are terminated"))
    for name in sorted(set(old_groups) & set(new_groups)):
        a, b = old_groups[name], new_groups[name]
        changed = tuple(sorted(k for k in set(a) | set(b) if _canon(a.get(k)) != _canon(b.get(k))))
        if not changed:
            continue
        refused = tuple(k for k in changed if k not in HYPERPOD_GROUP_IN_PLACE)
        detail = "; ".join(
            f"{k}: {show(a[k], 40) if k in a else '(not set)'} → {show(b[k], 40) if k in b else '(not set)'}"
            for k in changed
        )
        if refused:
            detail += (
                f". AWS documents no in-place change of {', '.join(refused)} on an existing group: add a "
                "group with a new name, move the work, then remove this one"
            )
            out.append(GroupChange(stack, logical_id, name, MAY_BE_REFUSED, changed, detail))
        else:
            out.append(GroupChange(stack, logical_id, name, "in place", changed, detail))
    return out


@dataclass
class Comparison:
    old_label: str
    stacks_added: list[str] = field(default_factory=list)
    stacks_removed: list[str] = field(default_factory=list)
    resources: list[ResourceChange] = field(default_factory=list)
    iam_added: list[IamStatement] = field(default_factory=list)
    iam_removed: list[IamStatement] = field(default_factory=list)
    sg_added: list[SgRule] = field(default_factory=list)
    sg_removed: list[SgRule] = field(default_factory=list)
    groups: list[GroupChange] = field(default_factory=list)
    old_cost: CostEstimate | None = None
    new_cost: CostEstimate | None = None

    def of(self, change: str) -> list[ResourceChange]:
        return [c for c in self.resources if c.change == change]

    @property
    def cost_delta(self) -> float:
        assert self.old_cost is not None and self.new_cost is not None
        return round(self.new_cost.total - self.old_cost.total, 2)


def _canon(v: Any) -> str:
    return json.dumps(v, sort_keys=True)


def _replacement_reasons(old, new, region: str) -> list[str]:
    if old.type != new.type:
        return [f"type {old.type} → {new.type}"]
    reasons = []
    for ptr in create_only_properties(new.type, region):
        f_old, v_old = pointer_value(old.properties, ptr)
        f_new, v_new = pointer_value(new.properties, ptr)
        if (f_old, _canon(v_old)) != (f_new, _canon(v_new)):
            name = ptr.removeprefix("/properties/")
            reasons.append(
                f"{name}: {show(v_old, 60) if f_old else '(not set)'} → {show(v_new, 60) if f_new else '(not set)'}"
            )
    return reasons


def compare(
    old_stacks: list[Stack], new_stacks: list[Stack], *, old_label: str, prices: PriceTable | None = None
) -> Comparison:
    cmp = Comparison(old_label=old_label)
    old_by, new_by = {s.key: s for s in old_stacks}, {s.key: s for s in new_stacks}
    cmp.stacks_added = sorted(set(new_by) - set(old_by))
    cmp.stacks_removed = sorted(set(old_by) - set(new_by))
    for key in sorted(set(old_by) | set(new_by)):
        old, new = old_by.get(key), new_by.get(key)
        old_res = {r.logical_id: r for r in old.resources()} if old else {}
        new_res = {r.logical_id: r for r in new.resources()} if new else {}
        region = (new or old).region  # type: ignore[union-attr]
        region = region if region.count("-") >= 2 else "us-east-1"
        for lid in sorted(set(new_res) - set(old_res)):
            r = new_res[lid]
            cmp.resources.append(ResourceChange(key, lid, r.type, "added", "", is_stateful(r)))
        for lid in sorted(set(old_res) - set(new_res)):
            r = old_res[lid]
            cmp.resources.append(
                ResourceChange(
                    key,
                    lid,
                    r.type,
                    "removed",
                    "data is deleted unless DeletionPolicy keeps it" if is_stateful(r) else "",
                    is_stateful(r),
                )
            )
        for lid in sorted(set(old_res) & set(new_res)):
            a, b = old_res[lid], new_res[lid]
            reasons = _replacement_reasons(a, b, region)
            if b.type == "AWS::SageMaker::Cluster" and a.type == b.type:
                cmp.groups += hyperpod_group_changes(key, lid, a.properties, b.properties)
            if reasons:
                cmp.resources.append(
                    ResourceChange(key, lid, b.type, "replaced", "; ".join(reasons), is_stateful(a) or is_stateful(b))
                )
            elif _canon(a.raw) != _canon(b.raw):
                keys = sorted(
                    k
                    for k in set(a.properties) | set(b.properties)
                    if _canon(a.properties.get(k)) != _canon(b.properties.get(k))
                )
                other = [
                    k
                    for k in ("DeletionPolicy", "UpdateReplacePolicy", "DependsOn", "Metadata", "Condition")
                    if _canon(a.raw.get(k)) != _canon(b.raw.get(k))
                ]
                cmp.resources.append(
                    ResourceChange(key, lid, b.type, "modified", ", ".join(keys + other), is_stateful(b))
                )
        old_iam = {s.identity(): s for s in (iam_statements(old) if old else [])}
        new_iam = {s.identity(): s for s in (iam_statements(new) if new else [])}
        cmp.iam_added += [new_iam[k] for k in sorted(set(new_iam) - set(old_iam))]
        cmp.iam_removed += [old_iam[k] for k in sorted(set(old_iam) - set(new_iam))]
        old_sg = {r.identity(): r for r in (security_group_rules(old) if old else [])}
        new_sg = {r.identity(): r for r in (security_group_rules(new) if new else [])}
        cmp.sg_added += [new_sg[k] for k in sorted(set(new_sg) - set(old_sg))]
        cmp.sg_removed += [old_sg[k] for k in sorted(set(old_sg) - set(new_sg))]
    cmp.old_cost = estimate(old_stacks, prices)
    cmp.new_cost = estimate(new_stacks, prices)
    return cmp
