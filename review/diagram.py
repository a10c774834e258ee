"""Architecture diagram drawn from the synthesized templates (graphviz ``dot``): what runs where.

The templates give the VPC and its subnets, EKS, the HyperPod instance groups and every stateful
or networked resource (review/diagram_graph.py). Where a config describes the environment, the
Ray heads and worker groups of its plan are drawn on their node pools, and the flow table's
network flows join the parts, each marked as proven or not by the review (review/diagram_ray.py).
The delivery pipeline's assembly gets its stages and approvals instead (review/diagram_pipeline.py).
Labels wrap; none is cut."""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

from review.diagram_graph import EKS_CLUSTER_SG, Graph, build
from review.diagram_pipeline import pipeline_dot
from review.diagram_ray import add_flows, add_ray, add_security_groups

if TYPE_CHECKING:
    from config.environment import EnvironmentConfig
    from review.assembly import Stack
    from review.proof import FlowResult


class DiagramError(Exception):
    pass


WRAP = 34  # characters per label line
# Fill colour and legend text of each kind of node.
KINDS = {
    "ray-head": ("#b6d7f2", "Ray head pod (plan)"),
    "ray-worker": ("#7fb3e0", "Ray worker group (plan)"),
    "hyperpod": ("#fde2c8", "HyperPod cluster, instance group"),
    "eks": ("#ffe9a8", "EKS control plane, node group"),
    "eks-addon": ("#fff5cc", "EKS add-on, Helm release"),
    "compute": ("#ffffff", "Lambda in the VPC"),
    "storage": ("#d9ead3", "FSx, S3, GCS store"),
    "secret": ("#fce5cd", "Secrets Manager secret"),
    "ecr": ("#d0e0e3", "ECR repository, pull-through cache"),
    "observability": ("#e1d5e7", "AMP, SNS, EventBridge"),
    "kms": ("#ead1dc", "KMS key"),
    "logs": ("#eeeeee", "CloudWatch log group"),
    "network": ("#dae8fc", "NAT, gateway, endpoints"),
    "sg": ("#f8cecc", "Security group"),
}
EDGES = {
    "flow": ('color="#1f4e9c", penwidth=1.6, fontcolor="#1f4e9c"', "network flow (flow table), proven"),
    "unproven": ('color="#c00000", penwidth=1.6, style=dashed, fontcolor="#c00000"', "network flow NOT proven"),
    "data": ('color="#2e7d32", penwidth=1.3, fontcolor="#2e7d32"', "data flow"),
    "guard": ('color="#c0504d", style=dotted, dir=none', "security group of (guards)"),
    "ref": ('color="#777777"', "template reference"),
    "placed": ('color="#bbbbbb", arrowsize=0.6', "runs on (EKS box), in subnets"),
}
# Template references that say where a resource is, drawn light and without a label.
QUIET = {"runs on", "subnet"}


def wrap(text: str, width: int = WRAP) -> str:
    """Each line of ``text`` wrapped at ``width`` (at spaces, hyphens, commas), never cut."""
    out: list[str] = []
    for line in text.split("\n"):
        out += textwrap.wrap(line, width, break_on_hyphens=True, break_long_words=True) or [""]
    return "\n".join(out)


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def graph_of(
    stacks: list[Stack],
    exports: dict[str, tuple[Stack, Any]],
    config: EnvironmentConfig | None = None,
    flows: list[FlowResult] | None = None,
) -> tuple[Graph, dict[str, dict[str, Any]]]:
    g, vpcs = build(stacks, exports)
    part_groups = add_security_groups(g, stacks)
    if config is not None:
        workload = add_ray(g, config, part_groups)
        add_flows(g, config, workload, flows)
    # A security group sits where what it guards sits, when that is one place.
    for sg in [n for n, k in g.kinds.items() if k == "sg"]:
        places = {g.placement.get(a) or _pool_place(g, a) for a, b in g.guards if b == sg}
        if len(places) == 1 and None not in places:
            g.placement[sg] = places.pop()  # type: ignore[assignment]
        elif sg == EKS_CLUSTER_SG:
            eks = g.of_type("AWS::EKS::Cluster")
            g.placement[sg] = g.placement.get(eks[0], "region") if eks else "region"
    return g, vpcs


def _pool_place(g: Graph, nid: str) -> str | None:
    return next((g.placement.get(a) for a, members in g.pools.items() if nid in members), None)


def to_dot(
    stacks: list[Stack],
    *,
    env: str,
    exports: dict[str, tuple[Stack, Any]],
    config: EnvironmentConfig | None = None,
    flows: list[FlowResult] | None = None,
) -> str:
    pipeline = pipeline_dot(stacks, env=env, wrap=wrap)
    if pipeline is not None:
        return pipeline
    g, vpcs = graph_of(stacks, exports, config, flows)
    title = f"Architecture: {env} (generated from the synthesized templates"
    title += ", the Ray pods from the sizing plan)" if config is not None else ")"
    lines = [
        "digraph architecture {",
        f"  graph [rankdir=LR, fontname=Helvetica, fontsize=14, compound=true, nodesep=0.25, ranksep=0.9, "
        f"label={_q(title)}, labelloc=t];",
        '  node [shape=box, style="rounded,filled", fillcolor="#ffffff", fontname=Helvetica, fontsize=10];',
        '  edge [fontname=Helvetica, fontsize=8, color="#777777"];',
    ]
    members = {m for ms in g.pools.values() for m in ms}

    def emit(nid: str, indent: str) -> None:
        if nid in members:
            return
        if nid in g.pools:
            name = g.nodes[nid].split("\n")[0]
            lines.append(f"{indent}subgraph cluster_pool_{nid} {{")
            lines.append(
                f'{indent}  label={_q(wrap("Node pool: " + name))}; style="rounded,filled"; '
                'fillcolor="#f3f8fd"; color="#4a86c5";'
            )
            for n in [nid, *g.pools[nid]]:
                _node(lines, g, n, indent + "  ")
            lines.append(f"{indent}}}")
            return
        _node(lines, g, nid, indent)

    for vi, (vid, v) in enumerate(sorted(vpcs.items())):
        lines.append(f"  subgraph cluster_vpc{vi} {{")
        lines.append(f'    label={_q("VPC " + ", ".join(v["cidrs"]))}; style="rounded"; color="#1f77b4";')
        vpc_label = _q("VPC\n" + ", ".join(v["cidrs"]))
        lines.append(f'    {vid}_vpc [label={vpc_label}, shape=folder, fillcolor="#e8f1fa"];')
        for sid, slabel in sorted(v["subnets"].items()):
            lines.append(f"    subgraph cluster_{sid} {{")
            lines.append('      label=""; style="dashed,rounded"; color="#7f7f7f";')
            lines.append(f'      {sid} [label={_q(wrap("Subnet " + slabel))}, shape=note, fillcolor="#f4f4f4"];')
            for nid in sorted(n for n, p in g.placement.items() if p == sid):
                emit(nid, "      ")
            lines.append("    }")
        in_vpc = sorted(n for n, p in g.placement.items() if p == "vpc:" + vid)
        # Each EKS control plane with what runs on it (add-ons, Helm releases, node groups).
        for ei, eks in enumerate(n for n in in_vpc if g.kinds.get(n) == "eks" and n in g.of_type("AWS::EKS::Cluster")):
            box = [eks, *sorted(a for (a, b), lb in g.edges.items() if b == eks and lb == "runs on" and a in in_vpc)]
            lines.append(f"    subgraph cluster_eks_{vi}_{ei} {{")
            lines.append('      label="EKS"; style="rounded,filled"; fillcolor="#fffbe6"; color="#d4a017";')
            for nid in box:
                emit(nid, "      ")
                in_vpc.remove(nid)
            lines.append("    }")
        for nid in in_vpc:
            emit(nid, "    ")
        lines.append("  }")
    regional = sorted(n for n, p in g.placement.items() if p == "region")
    if regional:
        lines.append("  subgraph cluster_region {")
        lines.append('    label="Regional services"; style="rounded"; color="#2ca02c";')
        ecr = [n for n in regional if g.kinds.get(n) == "ecr"]
        if ecr:
            lines.append('    subgraph cluster_ecr { label="ECR"; style="rounded,dashed"; color="#45818e";')
            for nid in ecr:
                emit(nid, "      ")
            lines.append("    }")
        for nid in regional:
            if nid not in ecr:
                emit(nid, "    ")
        lines.append("  }")
    drawn = set(g.nodes) | {sn for v in vpcs.values() for sn in v["subnets"]} | {v + "_vpc" for v in vpcs}
    _edges(lines, g, drawn)
    if ecr := [n for n in regional if g.kinds.get(n) == "ecr"]:
        for pool in sorted(p for p in g.pools if p in drawn):
            lines.append(
                f'  {ecr[0]} -> {pool} [ltail=cluster_ecr, lhead=cluster_pool_{pool}, label="image pulls", '
                f"{EDGES['data'][0]}];"
            )
    lines += _legend(g)
    lines.append("}")
    return "\n".join(lines) + "\n"


def _node(lines: list[str], g: Graph, nid: str, indent: str) -> None:
    color = KINDS.get(g.kinds.get(nid, ""), ("#ffffff", ""))[0]
    shape = ", shape=component" if g.kinds.get(nid) in ("ray-head", "ray-worker") else ""
    lines.append(f"{indent}{nid} [label={_q(wrap(g.nodes[nid]))}, fillcolor={_q(color)}{shape}];")


def _edges(lines: list[str], g: Graph, drawn: set[str]) -> None:
    def edge(a: str, b: str, label: str, style: str) -> None:
        if a in drawn and b in drawn:
            text = f"label={_q(wrap(label, 28))}, " if label else ""
            lines.append(f"  {a} -> {b} [{text}{EDGES[style][0]}];")

    said: dict[tuple[str, str], str] = {}  # a reference where a flow joins the same pair: said on the flow
    for (a, b), label in sorted(g.edges.items()):
        if label not in QUIET and ((a, b) in g.flows or (b, a) in g.flows):
            said[(a, b) if (a, b) in g.flows else (b, a)] = label + ": "
            continue
        edge(a, b, "" if label in QUIET else label, "placed" if label in QUIET else "ref")
    for a, b in sorted(g.guards):
        edge(a, b, "", "guard")
    for (a, b), ports in sorted(g.flows.items()):
        if (b, a) in g.flows and a != b:
            if a > b:  # drawn once, both ways, with the pair's other direction
                continue
            style = "unproven" if {(a, b), (b, a)} & g.unproven else "flow"
            back = _ports(g.flows[(b, a)])
            edge(a, b, f"{said.get((a, b), '')}{_ports(ports)}\n(back: {said.get((b, a), '')}{back})", style)
            lines[-1] = lines[-1].replace("];", ", dir=both];")
        else:
            edge(a, b, said.get((a, b), "") + _ports(ports), "unproven" if (a, b) in g.unproven else "flow")
    for (a, b), label in sorted(g.data.items()):
        edge(a, b, label, "data")


def _ports(ports: list[str]) -> str:
    """ "tcp 6379", "tcp 8265", "udp 53" -> "tcp 6379, 8265; udp 53"."""
    by_proto: dict[str, list[str]] = {}
    for p in ports:
        proto, _, what = p.partition(" ")
        by_proto.setdefault(proto, []).append(what)
    return "; ".join(f"{proto} {', '.join(w for w in whats if w)}".strip() for proto, whats in by_proto.items())


def _legend(g: Graph) -> list[str]:
    """A legend of the node kinds and edge styles the diagram uses (an HTML-like table)."""
    used = set(g.kinds.values())
    rows = [
        f'<TR><TD BGCOLOR="{color}" WIDTH="28"> </TD><TD ALIGN="LEFT">{text}</TD></TR>'
        for kind, (color, text) in KINDS.items()
        if kind in used
    ]
    styles = {"ref", "placed"} | ({"guard"} if g.guards else set()) | ({"data"} if g.data else set())
    styles |= {"unproven" if e in g.unproven else "flow" for e in g.flows}
    for style, (attrs, text) in EDGES.items():
        if style in styles:
            color = attrs.split('"')[1]
            mark = "· · · ·" if "dotted" in attrs else "– – –" if "dashed" in attrs else "———"
            rows.append(f'<TR><TD><FONT COLOR="{color}"><B>{mark}</B></FONT></TD><TD ALIGN="LEFT">{text}</TD></TR>')
    table = '<TABLE BORDER="0" CELLBORDER="1" CELLSPACING="0" CELLPADDING="3">'
    table += '<TR><TD COLSPAN="2"><B>Legend</B></TD></TR>' + "".join(rows) + "</TABLE>"
    return [f"  legend [shape=plaintext, style=solid, label=<{table}>];"]


def render_diagram(
    stacks: list[Stack],
    *,
    env: str,
    exports: dict[str, tuple[Stack, Any]],
    out_dir: Path,
    config: EnvironmentConfig | None = None,
    flows: list[FlowResult] | None = None,
) -> dict[str, Path]:
    dot_bin = shutil.which("dot")
    if dot_bin is None:
        raise DiagramError("graphviz 'dot' not found; install Debian's graphviz package (make deps does)")
    source = to_dot(stacks, env=env, exports=exports, config=config, flows=flows)
    files = {
        "dot": out_dir / f"architecture-{env}.dot",
        "svg": out_dir / f"architecture-{env}.svg",
        "png": out_dir / f"architecture-{env}.png",
    }
    files["dot"].write_text(source)
    for fmt in ("svg", "png"):
        proc = subprocess.run(
            [dot_bin, f"-T{fmt}", "-o", str(files[fmt]), str(files["dot"])], capture_output=True, text=True, timeout=120
        )
        if proc.returncode != 0:
            raise DiagramError(f"dot -T{fmt} failed: {proc.stderr.strip()}")
    return files
