"""The delivery pipeline's diagram (review/diagram.py draws it for an assembly with an
``AWS::CodePipeline::Pipeline``): its stages in order, one box each, with their actions in run
order: the source, the synth, the pipeline's self-update, the asset publishing, then one stage
per environment deploying its stacks (change set, then execute), and the production gates: the
permissions-broadening check and the manual approvals. The artifact bucket and its key sit
beside it."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from review.analysis import as_list, references, show

if TYPE_CHECKING:
    from review.assembly import Resource, Stack

APPROVAL = ('shape=octagon, fillcolor="#f6b26b", penwidth=1.5', "manual approval")
CHECK = ('shape=hexagon, fillcolor="#ffe599"', "automated gate (CodeBuild check)")
DEPLOY = ('fillcolor="#d9ead3"', "CloudFormation deploy: change set, then execute")
BUILD = ('fillcolor="#dae8fc"', "source, build, publish")


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _steps(stage: dict[str, Any]) -> list[tuple[int, str, str]]:
    """(run order, label, style) of each step of a stage: a stack's Prepare and Deploy actions are
    one step; a run order of several build actions (asset publishing) is one step."""
    steps: dict[str, tuple[int, str, str]] = {}
    builds: dict[int, list[str]] = {}
    for a in sorted(as_list(stage.get("Actions")), key=lambda a: (a.get("RunOrder", 1), a.get("Name", ""))):
        kind = a.get("ActionTypeId") or {}
        name, order, cfg = str(a.get("Name", "?")), int(a.get("RunOrder", 1)), a.get("Configuration") or {}
        shown = name.replace(".", " ")
        if kind.get("Category") == "Approval":
            text = show(cfg.get("CustomData", "")) if "#{" not in show(cfg.get("CustomData", "")) else ""
            steps[name] = (order, f"Manual approval\n{shown}" + (f"\n{text}" if text else ""), APPROVAL[0])
        elif kind.get("Category") == "Deploy":
            stack = name.split(".")[0]
            account = re.search(r":iam::(\d+):", show(a.get("RoleArn", "")))
            first = steps.get(stack, (order, "", ""))[0]
            where = f" into {account.group(1)}" if account else ""
            steps[stack] = (first, f"Deploy {stack}{where}\nchange set, then execute", DEPLOY[0])
        elif "ConfirmPermissionsBroadening" in name or "SecurityCheck" in show(cfg.get("ProjectName", "")):
            steps[name] = (order, f"Security check\n{shown}:\nstops on IAM or security-group broadening", CHECK[0])
        elif kind.get("Category") == "Source":
            what = show(cfg.get("FullRepositoryId", name)) + (
                f" @ {show(cfg['BranchName'])}" if "BranchName" in cfg else ""
            )
            steps[name] = (order, f"Source ({show(kind.get('Provider', ''))})\n{what}", BUILD[0])
        else:
            builds.setdefault(order, []).append(name)
    for order, names in builds.items():
        if len(names) == 1:
            steps[names[0]] = (order, f"{names[0]}\n(CodeBuild)", BUILD[0])
        else:
            images = [n for n in names if not n.endswith("_Code") and "Asset" not in n]
            text = f"{len(names)} builds (CodeBuild): " + ", ".join(images)
            text += f" and {len(names) - len(images)} file assets" if len(names) > len(images) else ""
            steps[f"builds{order}"] = (order, text, BUILD[0])
    return sorted(steps.values(), key=lambda s: (s[0], s[1]))


def pipeline_dot(stacks: list[Stack], *, env: str, wrap: Callable[[str], str]) -> str | None:
    """The pipeline's DOT source, or None when no stack has a CodePipeline pipeline."""
    found = [(s, r) for s in stacks for r in s.resources() if r.type == "AWS::CodePipeline::Pipeline"]
    if not found:
        return None
    lines = [
        "digraph pipeline {",
        f"  graph [rankdir=LR, fontname=Helvetica, fontsize=14, compound=true, newrank=true, ranksep=0.5, "
        f"label={_q('Delivery pipeline: ' + env + ' (generated from the synthesized templates)')}, labelloc=t];",
        '  node [shape=box, style="rounded,filled", fontname=Helvetica, fontsize=10];',
        '  edge [fontname=Helvetica, fontsize=8, color="#555555"];',
    ]
    for pi, (s, r) in enumerate(found):
        prev: str | None = None
        name = show(r.properties.get("Name", r.logical_id))
        for si, stage in enumerate(as_list(r.properties.get("Stages"))):
            stage_name = str(stage.get("Name", si))
            deploys = any((a.get("ActionTypeId") or {}).get("Category") == "Deploy" for a in stage.get("Actions", []))
            title = f"Stage {si + 1}: {stage_name}" + (" (environment)" if deploys else "")
            lines.append(f"  subgraph cluster_p{pi}_s{si} {{")
            fill = "#f4fbf2" if deploys else "#f5f8fd"
            lines.append(f'    label={_q(title)}; style="rounded,filled"; fillcolor="{fill}"; color="#888888";')
            # A stage's steps stack top to bottom (one rank); the stages run left to right.
            ids = [f"p{pi}_s{si}_a{ti}" for ti in range(len(_steps(stage)))]
            for nid, (_, label, style) in zip(ids, _steps(stage), strict=True):
                lines.append(f"    {nid} [label={_q(wrap(label))}, {style}];")
            lines.append("    {rank=same; " + "; ".join(ids) + "}")
            for a, b in itertools.pairwise(ids):  # drawn b -> a: dot stacks a rank upwards in LR
                lines.append(f"    {b} -> {a} [dir=back];")
            if prev is not None and ids:
                lines.append(f"    {prev} -> {ids[0]} [lhead=cluster_p{pi}_s{si}, constraint=true];")
            prev = ids[-1] if ids else prev
            lines.append("  }")
        lines += _artifacts(s, r, pi, name, wrap)
    lines += _legend()
    lines.append("}")
    return "\n".join(lines) + "\n"


def _artifacts(s: Stack, r: Resource, pi: int, name: str, wrap: Callable[[str], str]) -> list[str]:
    """The pipeline's artifact store (bucket and key), joined to the pipeline's first stage."""
    store = r.properties.get("ArtifactStore") or {}
    out = [f"  subgraph cluster_p{pi}_store {{", f"    label={_q('Pipeline ' + name + ': artifact store')};"]
    out.append('    style="rounded,dashed"; color="#888888";')
    ids = []
    # The bucket first, then its key.
    for lid in sorted(
        {t for t, _ in references(store)}, key=lambda t: "AWS::KMS" in str(getattr(s.resource(t), "type", ""))
    ):
        res = s.resource(lid)
        if res is None or f"p{pi}_{lid}" in ids:
            continue
        what = "S3 bucket\npipeline artifacts" if res.type == "AWS::S3::Bucket" else "KMS key\nof the artifact bucket"
        out.append(f'    p{pi}_{lid} [label={_q(wrap(what))}, fillcolor="#eeeeee"];')
        ids.append(f"p{pi}_{lid}")
    out.append("  }")
    if len(ids) == 2:
        out.append(f'  {ids[0]} -> {ids[1]} [label="encrypted with"];')
    if ids:
        out.append(f'  p{pi}_s0_a0 -> {ids[0]} [label="artifacts", style=dashed, lhead=cluster_p{pi}_store];')
    return out


def _legend() -> list[str]:
    rows = "".join(
        f'<TR><TD BGCOLOR="{style.split(chr(34))[1]}" WIDTH="28"> </TD><TD ALIGN="LEFT">{text}</TD></TR>'
        for style, text in (BUILD, DEPLOY, CHECK, APPROVAL)
    )
    table = (
        '<TABLE BORDER="0" CELLBORDER="1" CELLSPACING="0" CELLPADDING="3"><TR><TD COLSPAN="2"><B>Legend</B></TD></TR>'
    )
    return [f"  legend [shape=plaintext, style=solid, label=<{table}{rows}</TABLE>>];"]
