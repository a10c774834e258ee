"""The template half of the architecture diagram (review/diagram.py draws it): the VPC and its
subnets, what sits in each subnet, EKS and its node groups and Helm releases, the HyperPod
cluster with one node per instance group, the GCS store, the AMP workspace and collector, the
secrets, topics, ECR repositories, FSx, S3, KMS and logs, each security group with what it
guards, and the references between them (Ref/GetAtt, cross-stack imports, data repository
associations, flow logs)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from review.analysis import as_list, references, show
from review.assembly import Resource, Stack

# Edge labels for the property a reference sits in; other properties are shown by name.
EDGE_LABELS = {
    "KmsKeyId": "KMS",
    "KMSMasterKeyID": "KMS",
    "KmsMasterKeyId": "KMS",
    "BucketEncryption": "KMS",
    "EncryptionConfig": "KMS (secrets)",
    "VpcConfig": "VPC config",
    "ResourcesVpcConfig": "VPC config",
    "LoggingConfiguration": "access logs",
    "ClusterName": "runs on",
    "Orchestrator": "orchestrated by",
    "AuthToken": "AUTH token",
    "Destination": "remote write",
    "Source": "scrapes",
    "AlertManagerDefinition": "alerts",
    "Targets": "events",
    "CredentialArn": "registry credential",
}
# Properties whose references are placement (subnet, VPC) or noise, not connections.
NO_EDGE_PROPS = {"VpcId", "Tags", "CacheSubnetGroupName", "Role", "Layers", "Code", "Environment", "ServiceToken"}
SG = "AWS::EC2::SecurityGroup"
EKS_CLUSTER_SG = "eks_cluster_sg"  # the cluster security group EKS creates (no template has it)


@dataclass
class Graph:
    nodes: dict[str, str] = field(default_factory=dict)  # id -> label
    placement: dict[str, str] = field(default_factory=dict)  # node id -> subnet id or "vpc:<id>" or "region"
    edges: dict[tuple[str, str], str] = field(default_factory=dict)  # (a, b) -> label: references
    guards: set[tuple[str, str]] = field(default_factory=set)  # (guarded node, security group node)
    flows: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # network flows: ports
    unproven: set[tuple[str, str]] = field(default_factory=set)  # flow edges the review could not prove
    data: dict[tuple[str, str], str] = field(default_factory=dict)  # data flows: what moves
    pools: dict[str, list[str]] = field(default_factory=dict)  # node pool anchor -> Ray pods on it
    res: dict[str, tuple[Stack, Resource]] = field(default_factory=dict)  # node id -> its resource
    kinds: dict[str, str] = field(default_factory=dict)  # node id -> kind (the legend's colours)
    groups: dict[str, str] = field(default_factory=dict)  # HyperPod instance group name -> node id

    def of_type(self, type_: str) -> list[str]:
        return sorted(n for n, (_, r) in self.res.items() if r.type == type_)


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


def _label(r: Resource) -> tuple[str, str] | None:
    """(kind, label) of the node that stands for ``r``; None: not drawn."""
    p = r.properties
    t = r.type
    if t == "AWS::EC2::NatGateway":
        return "network", "NAT gateway"
    if t == "AWS::EC2::InternetGateway":
        return "network", "Internet gateway"
    if t == SG:
        return "sg", "Security group\n" + show(p.get("GroupDescription", ""), 10_000)
    if t == "AWS::EC2::VPCEndpoint" and p.get("VpcEndpointType", "Gateway") == "Gateway":
        return "network", "Gateway endpoint\n" + show(p.get("ServiceName")).split(".")[-1]
    if t == "AWS::FSx::FileSystem":
        lc = p.get("LustreConfiguration") or {}
        return "storage", (
            f"FSx for {show(p.get('FileSystemType', ''))} {show(p.get('FileSystemTypeVersion', ''))}\n"
            f"{show(lc.get('DeploymentType', ''))}, {show(p.get('StorageCapacity'))} GiB, "
            f"{show(lc.get('PerUnitStorageThroughput', '?'))} MB/s/TiB"
        )
    if t == "AWS::S3::Bucket":
        return "storage", "S3 bucket\n" + show(p.get("BucketName", _name(r)), 10_000)
    if t == "AWS::ElastiCache::ReplicationGroup":
        return "storage", (
            f"GCS store: ElastiCache for {show(p.get('Engine', '?')).capitalize()} {show(p.get('EngineVersion', ''))}\n"
            f"{show(p.get('NumCacheClusters', '?'))} × {show(p.get('CacheNodeType', '?'))}, "
            f"TLS port {show(p.get('Port', '?'))}"
        )
    if t == "AWS::SecretsManager::Secret":
        return "secret", "Secrets Manager secret\n" + show(p.get("Name", _name(r)), 10_000)
    if t == "AWS::SNS::Topic":
        return "observability", "SNS topic\n" + show(p.get("DisplayName") or p.get("TopicName") or _name(r), 10_000)
    if t == "AWS::APS::Workspace":
        return "observability", "AMP workspace\n" + show(p.get("Alias", _name(r)), 10_000)
    if t == "AWS::APS::Scraper":
        return "observability", "AMP managed collector\n" + show(p.get("Alias", _name(r)), 10_000)
    if t == "AWS::Events::Rule":
        return "observability", "EventBridge rule\n" + show(p.get("Description", _name(r)), 10_000)
    if t == "AWS::ECR::PullThroughCacheRule":
        return "ecr", (
            f"ECR pull-through cache\n{show(p.get('EcrRepositoryPrefix'))}/* from "
            f"{show(p.get('UpstreamRegistryUrl', '?'))}"
        )
    if t == "AWS::Lambda::Function" and "VpcConfig" in p:
        what = (
            "kubectl handler"
            if "KubectlProvider/Handler" in (r.path or "")
            else re.sub(r"[0-9A-Fa-f]{8,}.*", "", _name(r))
        )
        return "compute", f"Lambda {what}\n" + show(p.get("Description", ""), 10_000)
    if t == "AWS::KMS::Key":
        return "kms", "KMS key\n" + _name(r)
    if t == "AWS::Logs::LogGroup":
        return "logs", "Log group\n" + _name(r)
    if t == "AWS::EKS::Cluster":
        return "eks", f"EKS control plane\n{show(p.get('Name', _name(r)))} (Kubernetes {show(p.get('Version', '?'))})"
    if t == "AWS::EKS::Nodegroup":
        sc = p.get("ScalingConfig") or {}
        types = ", ".join(show(x) for x in as_list(p.get("InstanceTypes"))) or "launch template"
        return "eks", (
            f"EKS node group {show(p.get('NodegroupName', _name(r)))}\n{show(sc.get('DesiredSize', '?'))} × {types}"
        )
    if t == "AWS::EKS::Addon":
        return "eks-addon", "EKS add-on\n" + show(p.get("AddonName"))
    if t.startswith("Custom::") and "Chart" in p:  # Custom::AWSCDK-EKS-HelmChart (aws_eks, aws_eks_v2)
        return "eks-addon", (
            f"Helm release {show(p.get('Release', p.get('Chart')))}\n{show(p.get('Chart'))} {show(p.get('Version', ''))}"
        ).strip()
    if t == "AWS::SageMaker::Cluster":
        return "hyperpod", f"HyperPod cluster\n{show(p.get('ClusterName', _name(r)))}"
    return None


def build(stacks: list[Stack], exports: dict[str, tuple[Stack, Any]]) -> tuple[Graph, dict[str, dict[str, Any]]]:
    """The graph of the templates, and each VPC node with its CIDRs and subnets."""
    g = Graph()
    vpcs: dict[str, dict[str, Any]] = {}  # vpc node id -> {cidrs, subnets: {subnet node: label}}
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
    # ElastiCache subnet groups: their subnets place what names them.
    subnet_groups = {
        (s.key, r.logical_id): [n for n in nodes(s, r.properties.get("SubnetIds")) if n is not None and n in subnet_vpc]
        for s in stacks
        for r in s.resources()
        if r.type == "AWS::ElastiCache::SubnetGroup"
    }

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
            drawn = _label(r)
            if drawn is None:
                continue
            nid = _nid(s, r.logical_id)
            g.kinds[nid], g.nodes[nid] = drawn
            g.res[nid] = (s, r)
            proxy[(s.key, r.logical_id)] = nid
    for vpc, names in interface_endpoints.items():
        names = sorted(names)
        rows = [", ".join(names[i : i + 4]) for i in range(0, len(names), 4)]
        g.nodes[vpc + "_endpoints"] = f"{len(names)} interface endpoints\n" + "\n".join(rows)
        g.kinds[vpc + "_endpoints"] = "network"
        g.placement[vpc + "_endpoints"] = "vpc:" + vpc

    # Placement and edges
    for (skey, lid), nid in list(proxy.items()):
        if nid not in g.nodes or nid.endswith("_endpoints"):
            continue
        s, r = res_by_key[(skey, lid)]
        subnets_ref: list[str] = []
        vpc_ref: str | None = None
        for prop, value in r.properties.items():
            for key in resolve(s, value):
                subnets_ref += subnet_groups.get(key, [])
                target = proxy.get(key)
                if target is None or target == nid:
                    continue
                if target in subnet_vpc:
                    subnets_ref.append(target)
                elif target in vpcs:
                    vpc_ref = target
                elif g.kinds.get(target) == "sg":
                    g.guards.add((nid, target))
                elif prop == "InstanceGroups":  # the groups' EBS volume key and lifecycle scripts bucket
                    g.edges.setdefault(
                        (nid, target), "KMS (volumes)" if g.kinds[target] == "kms" else "lifecycle scripts"
                    )
                elif prop not in NO_EDGE_PROPS:
                    g.edges.setdefault((nid, target), EDGE_LABELS.get(prop, prop))
        subnets_ref = sorted(set(subnets_ref))
        if len(subnets_ref) == 1:
            g.placement[nid] = subnets_ref[0]
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
                g.kinds[gid] = "hyperpod"
                g.groups[show(grp.get("InstanceGroupName"))] = gid
                g.pools[gid] = []
                vpc_config = grp.get("OverrideVpcConfig") or r.properties.get("VpcConfig") or {}
                in_subnets = sorted(
                    {o for o in nodes(s, vpc_config.get("Subnets")) if o is not None and o in subnet_vpc}
                )
                g.placement[gid] = in_subnets[0] if len(in_subnets) == 1 else default_place
                if len(in_subnets) > 1:
                    g.edges.update({(gid, sn): "subnet" for sn in in_subnets})
                g.edges[(nid, gid)] = "instance group"
                for sg in nodes(s, vpc_config.get("SecurityGroupIds")):
                    if sg:
                        g.guards.add((gid, sg))
    _ecr_repositories(g, stacks)
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
                    g.data[(a, b)] = "data repository association\n" + show(r.properties.get("FileSystemPath", ""))
            elif r.type == "AWS::EC2::VPCGatewayAttachment":
                for v in nodes(s, r.properties.get("VpcId")):
                    for gw in nodes(s, r.properties.get("InternetGatewayId")):
                        if v in vpcs and gw:
                            g.placement[gw] = "vpc:" + v
            elif r.type == "AWS::EC2::Route" and show(r.properties.get("DestinationCidrBlock")) == "0.0.0.0/0":
                targets = nodes(s, r.properties.get("NatGatewayId") or r.properties.get("GatewayId"))
                for sn in route_table_subnets.get((s.key, show(r.properties.get("RouteTableId"))), []):
                    for t in targets:
                        if t:
                            g.edges[(sn, t)] = "0.0.0.0/0"
            elif r.type == "AWS::EC2::FlowLog":
                for a, b in joined(s, r, "ResourceId", "LogGroupName"):
                    g.edges[(a + "_vpc" if a in vpcs else a, b)] = "flow logs"
    # Helm releases and add-ons live on their EKS cluster: draw them beside it.
    for (a, b), label in list(g.edges.items()):
        if label == "runs on" and g.placement.get(a) == "region" and g.placement.get(b, "region") != "region":
            g.placement[a] = g.placement[b]
    for nid in g.of_type("AWS::EKS::Nodegroup"):
        g.pools[nid] = []
    return g, vpcs


def _ecr_repositories(g: Graph, stacks: list[Stack]) -> None:
    """The CDK asset repository (the bootstrap's) with the images the stacks build into it."""
    images: dict[str, set[str]] = {}
    for s in stacks:
        for image in s.docker_images.values():
            for dest in (image.get("destinations") or {}).values():
                images.setdefault(dest["repositoryName"], set()).add(str(image.get("displayName") or "image"))
    for i, (repo, names) in enumerate(sorted(images.items())):
        nid = f"n_ecr_assets_{i}"
        g.nodes[nid] = f"ECR repository (CDK assets)\n{repo}\n" + ", ".join(sorted(names))
        g.kinds[nid] = "ecr"
        g.placement[nid] = "region"
