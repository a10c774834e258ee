"""Build the reviewer's report for one environment (the stacks of one Stage or one synth)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from config.prices import PriceTable
from review import analysis as a
from review.assembly import Stack
from review.compare import Comparison
from review.cost import NOT_ESTIMATED, CostEstimate
from review.document import Document
from review.engines import DocumentCheck
from review.images import ImageRow, images_section
from review.kubernetes import kubernetes_section
from review.placement import placement_section
from review.proof import FlowResult
from review.sizing import sizing_section
from review.token_cost import (
    SERVING_MBU,
    TRAINING_GOODPUT,
    TRAINING_MFU,
    serving_token_costs,
    training_token_cost,
)

if TYPE_CHECKING:
    from config.environment import EnvironmentConfig


def _flags(flags: tuple[str, ...]) -> str:
    return "; ".join(flags)


def _money(v: float | None) -> str:
    return "n/a" if v is None else f"${v:,.2f}"


def build_report(
    env: str,
    stacks: list[Stack],
    *,
    cost: CostEstimate,
    prices: PriceTable,
    comparison: Comparison | None = None,
    diagram: str | None = None,
    flows: list[FlowResult] | None = None,
    config: EnvironmentConfig | None = None,
    documents: list[DocumentCheck] | None = None,
    images: list[ImageRow] | None = None,
    images_unavailable: str | None = None,
) -> Document:
    doc = Document(f"Review report: {env}")
    iam = [s for st in stacks for s in a.iam_statements(st)]
    sg = [r for st in stacks for r in a.security_group_rules(st)]
    enc = [e for st in stacks for e in a.encryption_status(st)]
    exposure = [x for st in stacks for x in a.internet_exposure(st)]
    risks = [x for st in stacks for x in a.replacement_risks(st)]
    acks = [k for st in stacks for k in st.acknowledgements()]
    skips = [k for st in stacks for k in a.checkov_skips(st)]

    doc.heading("Summary")
    doc.bullets(
        [
            "Stacks: "
            + ", ".join(
                f"`{s.display_name}` (aws://{s.account}/{s.region}, {len(s.resources())} resources, "
                f"termination protection {'on' if s.termination_protection else 'off'})"
                for s in stacks
            ),
            f"IAM statements: {len(iam)}, flagged: {sum(1 for s in iam if s.flags)}",
            f"Security-group rules: {len(sg)}, flagged: {sum(1 for r in sg if r.flags)}",
            f"Data stores: {len(enc)}, flagged: {sum(1 for e in enc if e.flags)}",
            f"Internet-reachable items: {len(exposure)}, flagged: {sum(1 for x in exposure if x.flagged)}",
            f"cdk-nag acknowledgements: {len(acks)}; checkov skips: {len(skips)}; "
            f"cfn-lint ignores: {sum(len(a.cfn_lint_ignores(st)) for st in stacks)}",
            (
                "Flows: not checked (no matching config)"
                if flows is None
                else f"Flows: {len(flows)}, not allowed: {sum(1 for f in flows if not f.ok)}"
            ),
            (
                "Documents checked by their engines: not checked"
                if documents is None
                else f"Documents checked by their engines: {len(documents)}, rejected: "
                f"{sum(1 for d in documents if not d.ok)}"
            ),
            f"Estimated monthly cost: {_money(cost.total)}"
            + (f" (excluding {len(cost.unpriced)} unpriced item(s))" if cost.unpriced else ""),
        ]
    )
    if diagram:
        doc.image(diagram, f"Architecture of {env}")

    if comparison is not None:
        _comparison(doc, comparison)

    if flows is not None:
        doc.heading("Flows")
        doc.para(
            "Every network and IAM/KMS flow the platform needs (constructs/flows.py), proven against these "
            "templates (review/flows.py): for each, the rule or statement that allows it. "
            f"{a.FLAG} marks a flow nothing allows."
        )
        doc.table(
            ["Flags", "Kind", "Flow", "What", "Allowed by"],
            [
                ["" if f.ok else f"{a.FLAG} not allowed", f.kind, f.name, f.what, f.detail]
                for f in sorted(flows, key=lambda f: (f.ok, f.kind, f.name))
            ],
        )

    if documents is not None:
        doc.heading("Documents checked by their engines")
        doc.para(
            "Every document a template carries, read back from the template and checked by the engine "
            f"that reads it at deploy time (review/engines.py). {a.FLAG} marks a rejected one: synth fails."
        )
        doc.table(
            ["Flags", "Resource", "Document", "Engine", "Verdict"],
            [
                ["" if d.ok else f"{a.FLAG} rejected", d.resource, d.document, d.engine, d.message]
                for d in sorted(documents, key=lambda d: (d.ok, d.resource))
            ],
        )

    doc.heading("Resources per stack by type")
    for s in stacks:
        doc.heading(s.display_name, 3)
        doc.table(["Type", "Count"], a.resources_by_type(s))

    doc.heading("IAM statements")
    doc.para(
        "Every statement of every policy document (identity policies, trust policies, resource policies). "
        f"{a.FLAG} marks wildcard actions or resources in Allow statements."
    )
    doc.table(
        ["Flags", "Stack", "Resource", "Document", "Effect", "Principal", "Actions", "Resources", "Condition"],
        [
            [
                _flags(s.flags),
                s.stack,
                f"{s.resource} ({s.resource_type})",
                s.document,
                s.effect,
                s.principals,
                s.actions,
                s.resources,
                s.conditions,
            ]
            for s in sorted(iam, key=lambda s: (not s.flags, s.stack, s.resource))
        ],
    )

    doc.heading("Security-group rules")
    doc.table(
        ["Flags", "Stack", "Group", "Rule", "Direction", "Protocol", "Ports", "Peer", "Description"],
        [
            [_flags(r.flags), r.stack, r.group, r.rule, r.direction, r.protocol, r.ports, r.peer, r.description]
            for r in sg
        ],
    )

    doc.heading("Encryption at rest")
    doc.table(
        ["Flags", "Stack", "Resource", "Type", "Status", "Key"],
        [[_flags(e.flags), e.stack, e.resource, e.type, e.status, e.key] for e in enc],
    )

    doc.heading("Reachable from the internet")
    doc.table(
        ["Flags", "Stack", "Resource", "Type", "What"],
        [[f"{a.FLAG} inbound" if x.flagged else "", x.stack, x.resource, x.type, x.what] for x in exposure],
        empty="Nothing in these templates is reachable from the internet.",
    )

    doc.heading("Replacement risks: create-only properties of stateful resources")
    doc.para(
        "Changing any of these properties (or the resource's logical ID) makes CloudFormation create a new "
        "resource and delete the old one: data loss for stores, every node for the HyperPod cluster. "
        "Create-only properties come from the CloudFormation resource schemas shipped with cfn-lint."
    )
    doc.table(
        ["Stack", "Resource", "Type", "DeletionPolicy", "Create-only property", "Current value"],
        [[r.stack, r.resource, r.type, r.deletion_policy, r.prop, r.value] for r in risks],
    )

    placement_section(doc, env)

    sizing_section(doc, env)

    kubernetes_section(doc, stacks, config)

    images_section(doc, images, unavailable=images_unavailable)

    doc.heading("cdk-nag acknowledgements")
    doc.table(
        ["Stack", "Construct", "Rule", "Reason", "Resources covered"],
        [[k.stack, k.path, k.rule, k.reason, ", ".join(k.resources) or "(none)"] for k in acks],
    )
    doc.heading("checkov skips")
    doc.table(["Stack", "Resource", "Check", "Comment"], [[k.stack, k.resource, k.check, k.comment] for k in skips])

    doc.heading("cfn-lint ignores")
    lint = [k for st in stacks for k in a.cfn_lint_ignores(st)]
    doc.table(["Stack", "Resource", "Rule", "Reason"], [[k.stack, k.resource, k.rule, k.reason] for k in lint])

    doc.heading("Estimated monthly cost")
    doc.para(
        f"On-demand list prices from `config/prices.yaml` ({prices.data['region']}, {prices.data['currency']}, "
        f"recorded {prices.data['recorded']}, {prices.hours:g} hours per month). Not estimated: {NOT_ESTIMATED}."
    )
    doc.table(
        ["Item", "Stack", "Resource", "Quantity", "Unit price", "Monthly", "Source"],
        [
            [
                ("" if i.monthly is not None else f"{a.FLAG} ") + i.item,
                i.stack,
                i.resource,
                i.quantity,
                i.unit_price,
                _money(i.monthly),
                prices.source(i.section) + ("" if prices.verified(i.section) else f" ({a.FLAG} unverified price)"),
            ]
            for i in cost.items
        ],
    )
    doc.para(
        f"**Total: {_money(cost.total)} per month**"
        + (
            f" — {a.FLAG} {len(cost.unpriced)} item(s) have no price in the table and are not included."
            if cost.unpriced
            else ""
        )
    )
    if config is not None:
        _token_costs(doc, config, prices)
    return doc


def _token_costs(doc: Document, config: EnvironmentConfig, prices: PriceTable) -> None:
    """Cost per million tokens: the GPU-hour price of the workload's instance group over the
    tokens one GPU produces in an hour, with every assumption in the table."""
    rows = []
    for c in (training_token_cost(config, prices), *serving_token_costs(config, prices)):
        if c is None:
            continue
        rows.append(
            [
                c.workload,
                f"{c.instance_type} ({c.chip})",
                str(c.gpus),
                _money(c.gpu_hour),
                "n/a" if c.tokens_per_s_per_gpu is None else f"{c.tokens_per_s_per_gpu:,.0f}",
                c.basis,
                f"{c.goodput:.0%} (assumed)"
                if c.goodput is not None
                else ("every batch full (assumed)" if c.tokens_per_s_per_gpu is not None else "n/a"),
                ("" if c.per_million is not None else f"{a.FLAG} ")
                + ("n/a" if c.per_million is None else f"${c.per_million:.4g}"),
            ]
        )
    doc.heading("Cost per million tokens", level=3)
    doc.para(
        "Training: the instance group's hourly price per GPU over the tokens one GPU trains in an hour at "
        f"an assumed {TRAINING_MFU:.1%} model FLOPs utilization of the chip's dense bf16 peak "
        "(config/catalog.py GPU_DENSE_BF16_TFLOPS; bench/training_gpu.py measured 36.5 % for prod's step on one "
        "H200, the Llama 3 paper reports 38-43 % on H100), or the MFU a run measured where "
        "training.measured_mfu gives it (the job reports it: ray_train_mfu; the row's basis says which), times an "
        f"assumed {TRAINING_GOODPUT:.0%} goodput (the share of wall time that becomes kept steps; the "
        "job measures it: ray_train_goodput_ratio). Per GPU, so the same at any worker count. Serving: no "
        "generation throughput is measured on a GPU any environment serves on, so tokens/s is a decode "
        f"roofline: an assumed {SERVING_MBU:.0%} of the GPU's memory bandwidth (config/catalog.py "
        "GPU_MEMORY_BANDWIDTH_GBPS; Databricks measured 55-60 % at batch 1) over the bytes of the served "
        "weights, each step advancing every sequence of a full batch, capped by compute; KV-cache reads, "
        "prefill and partly filled batches are not counted, so it is an upper bound on tokens/s and a "
        "floor on the cost. A service whose model size the config does not state is not priced."
    )
    doc.table(
        ["Workload", "GPU", "GPUs", "$/GPU-hour", "Tokens/s per GPU", "Throughput basis", "Goodput", "$ per 1M tokens"],
        rows,
        empty="No GPU instance group.",
    )


def _comparison(doc: Document, c: Comparison) -> None:
    doc.heading(f"Changes against {c.old_label}")
    if c.stacks_added or c.stacks_removed:
        doc.bullets(
            [f"stack added: `{s}`" for s in c.stacks_added]
            + [f"{a.FLAG} stack removed: `{s}`" for s in c.stacks_removed]
        )
    counts = {k: len(c.of(k)) for k in ("added", "removed", "replaced", "modified")}
    doc.para(", ".join(f"{v} {k}" for k, v in counts.items()) + " resource(s).")
    rows = []
    for ch in c.resources:
        danger = ch.change in ("removed", "replaced") and ch.stateful
        rows.append([f"{a.FLAG} stateful" if danger else "", ch.change, ch.stack, ch.logical_id, ch.type, ch.detail])
    doc.table(["Flags", "Change", "Stack", "Resource", "Type", "Detail"], rows, empty="No resource changes.")
    doc.heading("HyperPod instance-group changes", 3)
    doc.table(
        ["Flags", "Change", "Stack", "Cluster", "Group", "Detail"],
        [
            [f"{a.FLAG} {g.change}" if g.risky else "", g.change, g.stack, g.logical_id, g.group, g.detail]
            for g in c.groups
        ],
        empty="No instance-group changes.",
    )
    doc.heading("IAM changes", 3)
    doc.table(
        ["Change", "Flags", "Stack", "Resource", "Effect", "Actions", "Resources"],
        [["added", _flags(s.flags), s.stack, s.resource, s.effect, s.actions, s.resources] for s in c.iam_added]
        + [["removed", _flags(s.flags), s.stack, s.resource, s.effect, s.actions, s.resources] for s in c.iam_removed],
        empty="No IAM statement changes.",
    )
    doc.heading("Security-group changes", 3)
    doc.table(
        ["Change", "Flags", "Stack", "Group", "Direction", "Protocol", "Ports", "Peer"],
        [["added", _flags(r.flags), r.stack, r.group, r.direction, r.protocol, r.ports, r.peer] for r in c.sg_added]
        + [
            ["removed", _flags(r.flags), r.stack, r.group, r.direction, r.protocol, r.ports, r.peer]
            for r in c.sg_removed
        ],
        empty="No security-group rule changes.",
    )
    doc.heading("Cost delta", 3)
    assert c.old_cost is not None and c.new_cost is not None
    old_items, new_items = c.old_cost.by_item(), c.new_cost.by_item()
    rows = []
    for item in sorted(set(old_items) | set(new_items)):
        o, n = old_items.get(item, 0.0), new_items.get(item, 0.0)
        if round(n - o, 2):
            rows.append([item, _money(o), _money(n), f"{n - o:+,.2f}"])
    doc.table(["Item", "Before", "After", "Delta"], rows, empty="No cost change.")
    doc.para(f"Total: {_money(c.old_cost.total)} → {_money(c.new_cost.total)} ({c.cost_delta:+,.2f} per month).")
