"""Architecture diagram drawn from the synthesized templates (graphviz ``dot``): the VPC and
its subnets, what sits in each subnet, EKS and its node groups and Helm releases, the HyperPod
cluster with one box per instance group (count × type), FSx, S3, KMS, logs, and the references
between them (Ref/GetAtt, cross-stack imports, data repository associations, flow logs)."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from review.analysis import as_list, references, show
from review.assembly import Resource, Stack


class DiagramError(Exception):
    pass


# Edge labels for the property a reference sits in; other properties are shown by name.
EDGE_LABELS = {
    "KmsKeyId": "KMS",
    "KMSMasterKeyID": "KMS",
    "BucketEncryption": "KMS",
    "EncryptionConfig": "KMS (secrets)",
    "SecurityGroupIds": "SG",
    "VpcConfig": "VPC config",
    "ResourcesVpcConfig": "VPC config",
    "LoggingConfiguration": "access logs",
    "ClusterName": "runs on",
    "Orchestrator": "orchestrated by",
    "InstanceGroups": "instance groups",
}
# Properties whose references are placement (subnet, VPC) or noise, not connections.
NO_EDGE_PROPS = {"VpcId", "Tags"}


@dataclass
class Graph:
    nodes: dict[str, str] = field(default_factory=dict)  # id -> attributes
    placement: dict[str, str] = field(default_factory=dict)  # node id -> subnet id or "vpc:<id>" or "region"
    edges: dict[tuple[str, str], str] = field(default_factory=dict)  # (a, b) -> label


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _nid(stack: Stack, lid: str, suffix: str = "") -> str:
    return "n_" + re.sub(r"[^A-Za-z0-9_]", "_", f"{stack.key}_{lid}{suffix}")


def _name(r: Resource) -> str:
    """The construct's own name from its path (…/HyperPodSubnetUse1az4/Subnet -> HyperPodSubnetUse1az4)."""
    if not r.path:
        return r.logical_id
    parts = [p for p in r.path.split("/") if p]
    while len(parts) > 1 and parts[-1] in ("Resource", "Default", "Subnet", "Key", "FileSystem", "Bucket", "Cluster"):
        parts.pop()
    return parts[-1]


def _tag(r: Resource, key: str) -> str | None:
    for t in as_list(r.properties.get("Tags")):
        if isinstance(t, dict) and t.get("Key") == key:
            return show(t.get("Value"))
    return None


def _label(r: Resource) -> str | None:
    p = r.properties
    t = r.type
    if t == "AWS::EC2::NatGateway":
        return "NAT gateway"
    if t == "AWS::EC2::InternetGateway":
        return "Internet gateway"
    if t == "AWS::EC2::SecurityGroup":
        return "Security group\n" + show(p.get("GroupDescription", ""), 48)
    if t == "AWS::EC2::VPCEndpoint" and p.get("VpcEndpointType", "Gateway") == "Gateway":
        return "Gateway endpoint\n" + show(p.get("ServiceName")).split(".")[-1]
    if t == "AWS::FSx::FileSystem":
        lc = p.get("LustreConfiguration") or {}
        return (
            f"FSx for {show(p.get('FileSystemType', ''))} {show(p.get('FileSystemTypeVersion', ''))}\n"
            f"{show(lc.get('DeploymentType', ''))}, {show(p.get('StorageCapacity'))} GiB, "
            f"{show(lc.get('PerUnitStorageThroughput', '?'))} MB/s/TiB"
        )
    if t == "AWS::S3::Bucket":
        return "S3 bucket\n" + show(p.get("BucketName", _name(r)), 60)
    if t == "AWS::KMS::Key":
        return "KMS key\n" + _name(r)
    if t == "AWS::Logs::LogGroup":
        return "Log group\n" + _name(r)
    if t == "AWS::EKS::Cluster":
        return f"EKS control plane\n{show(p.get('Name', _name(r)))} (Kubernetes {show(p.get('Version', '?'))})"
    if t == "AWS::EKS::Nodegroup":
        sc = p.get("ScalingConfig") or {}
        types = ", ".join(show(x) for x in as_list(p.get("InstanceTypes"))) or "launch template"
        return f"EKS node group {show(p.get('NodegroupName', _name(r)))}\n{show(sc.get('DesiredSize', '?'))} × {types}"
    if t == "AWS::EKS::Addon":
        return "EKS add-on\n" + show(p.get("AddonName"))
    if t.startswith("Custom::") and "Chart" in p:  # Custom::AWSCDK-EKS-HelmChart (aws_eks, aws_eks_v2)
        return f"Helm release {show(p.get('Release', p.get('Chart')))}\n{show(p.get('Chart'))} {show(p.get('Version', ''))}".strip()
    if t == "AWS::SageMaker::Cluster":
        return f"HyperPod cluster\n{show(p.get('ClusterName', _name(r)))}"
    return None


def _graph(stacks: list[Stack], exports: dict[str, tuple[Stack, Any]]) -> tuple[Graph, dict[str, dict[str, Any]]]:
    g = Graph()
    vpcs: dict[str, dict[str, Any]] = {}  # vpc node id -> {label, subnets: {subnet node: label}}
    proxy: dict[tuple[str, str], str] = {}  # (stack key, lid) -> node id that stands for it
    res_by_key = {(s.key, r.logical_id): (s, r) for s in stacks for r in s.resources()}

    def resolve(stack: Stack, value: Any) -> list[tuple[str, str]]:
        out = []
        for target, kind in references(value):
            if kind == "import":
                exp = exports.get(target)
                if exp:
                    out += [(exp[0].key, t) for t, k in references(exp[1]) if k == "ref"]
            else:
                out.append((stack.key, target))
        return out

    def nodes(stack: Stack, value: Any) -> list[str | None]:
        """The graph nodes that stand for what ``value`` references (None: no node for it)."""
        return [proxy.get(k) for k in resolve(stack, value)]

    def joined(stack: Stack, r: Any, source: str, target: str) -> list[tuple[str, str]]:
        """Every pair of nodes a link resource joins through its ``source`` and ``target`` properties."""
        ends = nodes(stack, r.properties.get(target))
        return [(a, b) for a in nodes(stack, r.properties.get(source)) if a for b in ends if b]

    # VPCs, secondary blocks, subnets
    for s in stacks:
        for r in s.resources():
            if r.type == "AWS::EC2::VPC":
                nid = _nid(s, r.logical_id)
                vpcs[nid] = {"cidrs": [show(r.properties.get("CidrBlock"))], "subnets": {}}
                proxy[(s.key, r.logical_id)] = nid
    for s in stacks:
        for r in s.resources():
            if r.type == "AWS::EC2::VPCCidrBlock":
                for key in resolve(s, r.properties.get("VpcId")):
                    if key in proxy:
                        vpcs[proxy[key]]["cidrs"].append(show(r.properties.get("CidrBlock")))
            elif r.type == "AWS::EC2::Subnet":
                vpc = next((proxy[k] for k in resolve(s, r.properties.get("VpcId")) if k in proxy), None)
                if vpc is None:
                    continue
                kind = _tag(r, "aws-cdk:subnet-type")
                name = _name(r)
                az = show(r.properties.get("AvailabilityZoneId") or r.properties.get("AvailabilityZone") or "")
                label = (
                    f"{name}"
                    + (f" ({kind})" if kind and kind not in name else "")
                    + f"\n{show(r.properties.get('CidrBlock'))} {az}"
                )
                nid = _nid(s, r.logical_id)
                vpcs[vpc]["subnets"][nid] = label
                proxy[(s.key, r.logical_id)] = nid
    subnet_vpc = {sn: v for v, d in vpcs.items() for sn in d["subnets"]}

    interface_endpoints: dict[str, list[str]] = {}
    for s in stacks:
        for r in s.resources():
            if r.type == "AWS::EC2::VPCEndpoint" and r.properties.get("VpcEndpointType") == "Interface":
                vpc = next((proxy[k] for k in resolve(s, r.properties.get("VpcId")) if k in proxy), None)
                if vpc:
                    svc = show(r.properties.get("ServiceName"))
                    m = re.match(r"^com\.amazonaws\.[^.]+\.(.+)$", svc)
                    interface_endpoints.setdefault(vpc, []).append(m.group(1) if m else svc)
                    proxy[(s.key, r.logical_id)] = vpc + "_endpoints"
                continue
            label = _label(r)
            if label is None:
                continue
            nid = _nid(s, r.logical_id)
            g.nodes[nid] = label
            proxy[(s.key, r.logical_id)] = nid
    for vpc, names in interface_endpoints.items():
        names = sorted(names)
        rows = [", ".join(names[i : i + 4]) for i in range(0, len(names), 4)]
        g.nodes[vpc + "_endpoints"] = f"{len(names)} interface endpoints\n" + "\n".join(rows)
        g.placement[vpc + "_endpoints"] = "vpc:" + vpc

    # Placement and edges
    for (skey, lid), nid in list(proxy.items()):
        if nid not in g.nodes or nid.endswith("_endpoints"):
            continue
        s, r = res_by_key[(skey, lid)]
        placed_in: set[str] = set()
        subnets_ref: list[str] = []
        vpc_ref: str | None = None
        for prop, value in r.properties.items():
            for key in resolve(s, value):
                target = proxy.get(key)
                if target is None or target == nid:
                    continue
                if target in subnet_vpc:
                    subnets_ref.append(target)
                elif target in vpcs:
                    vpc_ref = target
                elif prop not in NO_EDGE_PROPS:
                    g.edges.setdefault((nid, target), EDGE_LABELS.get(prop, prop))
        subnets_ref = sorted(set(subnets_ref))
        if len(subnets_ref) == 1:
            g.placement[nid] = subnets_ref[0]
            placed_in.add(subnets_ref[0])
        elif subnets_ref:
            g.placement[nid] = "vpc:" + subnet_vpc[subnets_ref[0]]
            for sn in subnets_ref:
                g.edges.setdefault((nid, sn), "subnet")
        elif vpc_ref:
            g.placement[nid] = "vpc:" + vpc_ref
        else:
            g.placement.setdefault(nid, "region")
        if r.type == "AWS::SageMaker::Cluster":
            default_place = g.placement[nid]
            for i, grp in enumerate(as_list(r.properties.get("InstanceGroups"))):
                gid = f"{nid}_g{i}"
                g.nodes[gid] = (
                    f"Instance group {show(grp.get('InstanceGroupName'))}\n"
                    f"{show(grp.get('InstanceCount'))} × {show(grp.get('InstanceType'))}"
                )
                override = nodes(s, (grp.get("OverrideVpcConfig") or {}).get("Subnets"))
                override = [o for o in override if o in subnet_vpc]
                g.placement[gid] = override[0] if len(override) == 1 else default_place
                g.edges[(nid, gid)] = "instance group"
    # Route tables -> the subnets they are associated with (for default-route edges).
    route_table_subnets: dict[tuple[str, str], list[str]] = {}
    for s in stacks:
        for r in s.resources():
            if r.type == "AWS::EC2::SubnetRouteTableAssociation":
                for key in resolve(s, r.properties.get("SubnetId")):
                    if proxy.get(key) in subnet_vpc:
                        route_table_subnets.setdefault((s.key, show(r.properties.get("RouteTableId"))), []).append(
                            proxy[key]
                        )
    # Link resources: associations drawn as labelled edges between the resources they join.
    for s in stacks:
        for r in s.resources():
            if r.type == "AWS::FSx::DataRepositoryAssociation":
                for a, b in joined(s, r, "FileSystemId", "DataRepositoryPath"):
                    g.edges[(a, b)] = "data repository association\n" + show(r.properties.get("FileSystemPath", ""))
            elif r.type == "AWS::EC2::VPCGatewayAttachment":
                vpc = nodes(s, r.properties.get("VpcId"))
                igw = nodes(s, r.properties.get("InternetGatewayId"))
                for v in vpc:
                    for i in igw:
                        if v in vpcs and i:
                            g.placement[i] = "vpc:" + v
            elif r.type == "AWS::EC2::Route" and show(r.properties.get("DestinationCidrBlock")) == "0.0.0.0/0":
                target = nodes(s, r.properties.get("NatGatewayId") or r.properties.get("GatewayId"))
                for sn in route_table_subnets.get((s.key, show(r.properties.get("RouteTableId"))), []):
                    for t in target:
                        if t:
                            g.edges[(sn, t)] = "0.0.0.0/0"
            elif r.type == "AWS::EC2::FlowLog":
                for a, b in joined(s, r, "ResourceId", "LogGroupName"):
                    g.edges[(a + "_vpc" if a in vpcs else a, b)] = "flow logs"
    # Helm releases and add-ons live on their EKS cluster: draw them beside it.
    for (a, b), label in list(g.edges.items()):
        if label == "runs on" and g.placement.get(a) == "region" and g.placement.get(b, "region") != "region":
            g.placement[a] = g.placement[b]
    return g, vpcs


def to_dot(stacks: list[Stack], *, env: str, exports: dict[str, tuple[Stack, Any]]) -> str:
    g, vpcs = _graph(stacks, exports)
    lines = [
        "digraph architecture {",
        f"  graph [rankdir=LR, fontname=Helvetica, fontsize=12, compound=true, label={_q('Architecture: ' + env + ' (generated from the synthesized templates)')}, labelloc=t];",
        '  node [shape=box, style="rounded,filled", fillcolor="#ffffff", fontname=Helvetica, fontsize=10];',
        '  edge [fontname=Helvetica, fontsize=8, color="#555555"];',
    ]

    def emit(nid: str, indent: str) -> None:
        label = g.nodes[nid]
        color = _color(label)
        lines.append(f"{indent}{nid} [label={_q(label)}, fillcolor={_q(color)}];")

    for vi, (vid, v) in enumerate(sorted(vpcs.items())):
        lines.append(f"  subgraph cluster_vpc{vi} {{")
        lines.append(f'    label={_q("VPC " + ", ".join(v["cidrs"]))}; style="rounded"; color="#1f77b4";')
        vpc_label = _q("VPC\n" + ", ".join(v["cidrs"]))
        lines.append(f'    {vid}_vpc [label={vpc_label}, shape=folder, fillcolor="#e8f1fa"];')
        for sid, slabel in sorted(v["subnets"].items()):
            lines.append(f"    subgraph cluster_{sid} {{")
            lines.append('      label=""; style="dashed,rounded"; color="#7f7f7f";')
            lines.append(f'      {sid} [label={_q("Subnet " + slabel)}, shape=note, fillcolor="#f4f4f4"];')
            for nid in sorted(n for n, p in g.placement.items() if p == sid):
                emit(nid, "      ")
            lines.append("    }")
        in_vpc = sorted(n for n, p in g.placement.items() if p == "vpc:" + vid)
        # Each EKS control plane with what runs on it (add-ons, Helm releases, node groups).
        for ei, eks in enumerate(n for n in in_vpc if g.nodes[n].startswith("EKS control plane")):
            members = [
                eks,
                *sorted(a for (a, b), label in g.edges.items() if b == eks and label == "runs on" and a in in_vpc),
            ]
            lines.append(f"    subgraph cluster_eks_{vi}_{ei} {{")
            lines.append('      label="EKS"; style="rounded,filled"; fillcolor="#fffbe6"; color="#d4a017";')
            for nid in members:
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
        for nid in regional:
            emit(nid, "    ")
        lines.append("  }")
    drawn = set(g.nodes) | {sn for v in vpcs.values() for sn in v["subnets"]} | {v + "_vpc" for v in vpcs}
    for (a, b), label in sorted(g.edges.items()):
        if a in drawn and b in drawn:
            lines.append(f"  {a} -> {b} [label={_q(label)}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _color(label: str) -> str:
    for prefix, color in (
        ("HyperPod", "#fde2c8"),
        ("Instance group", "#fde2c8"),
        ("EKS", "#ffe9a8"),
        ("Helm", "#fff5cc"),
        ("FSx", "#d9ead3"),
        ("S3", "#d9ead3"),
        ("KMS", "#ead1dc"),
        ("Log group", "#eeeeee"),
        ("NAT", "#dae8fc"),
        ("Internet", "#dae8fc"),
        ("Security group", "#f8cecc"),
    ):
        if label.startswith(prefix):
            return color
    return "#ffffff"


def render_diagram(
    stacks: list[Stack], *, env: str, exports: dict[str, tuple[Stack, Any]], out_dir: Path
) -> dict[str, Path]:
    dot_bin = shutil.which("dot")
    if dot_bin is None:
        raise DiagramError("graphviz 'dot' not found; install Debian's graphviz package (make deps does)")
    source = to_dot(stacks, env=env, exports=exports)
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
