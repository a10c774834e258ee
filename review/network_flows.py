"""The network checks of the flow table (``constructs/network_flows.py``), over the template JSON:

- Network flows: an egress rule of a source group and an ingress rule of a destination group,
  by group reference or by a CIDR that holds the other side's subnets. The security group EKS
  creates for the cluster (``ClusterSecurityGroupId``, given to managed node groups without a
  launch template and to the control plane) is not in any template: its default rules are
  modelled as EKS documents them
  (https://docs.aws.amazon.com/eks/latest/userguide/sec-group-reqs.html).
- Denied flows (``denied_flows``): no egress/ingress pair of rules lets the source reach the
  destination. Pods with their own security group (EKS security groups for pods) are found
  through the SecurityGroupPolicy a template applies, in the subnets of the nodes they run on.
- Flows that leave the VPC: a gateway endpoint or a NAT default route in the source subnets'
  route tables, or an interface endpoint with private DNS whose group admits the source on 443.

The checks share one index of the group rules and of what each part is attached to.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from constructs import flows as F

from config.facts.names import SYSTEM_NODEGROUP, WORKLOADS_NAMESPACE
from review.assembly import Stack
from review.proof import Env, FlowResult

EKS_DEFAULT_RULES = "EKS default rule of the cluster security group (EKS user guide, sec-group-reqs)"


@dataclass(frozen=True)
class Rule:
    group: str
    direction: str  # ingress / egress
    protocol: str  # "-1", "tcp", "udp", ...
    ports: tuple[int, int]
    peer_group: str | None
    peer_cidr: str | None
    source: str  # for the report


_PROTO = {"6": "tcp", "17": "udp", "1": "icmp", "-1": "-1", "all": "-1"}


def _rule(env: Env, stack: Stack, group: str, direction: str, p: dict[str, Any], source: str) -> Rule:
    proto = _PROTO.get(str(p.get("IpProtocol")).lower(), str(p.get("IpProtocol")).lower())
    lo, hi = (0, 65535) if proto == "-1" else (int(p.get("FromPort", 0)), int(p.get("ToPort", 65535)))
    peer = p.get("SourceSecurityGroupId") if direction == "ingress" else p.get("DestinationSecurityGroupId")
    cidr = p.get("CidrIp")
    return Rule(
        group,
        direction,
        proto,
        (lo, hi),
        env.value(stack, peer) if peer is not None else None,
        env.value(stack, cidr) if cidr is not None else None,
        source,
    )


def security_group_rules(env: Env) -> list[Rule]:
    rules: list[Rule] = []
    for s, lid, r in env.resources("AWS::EC2::SecurityGroup"):
        gid = env.attr(s, lid, "GroupId")
        p = env.props(r)
        for direction, key in (("ingress", "SecurityGroupIngress"), ("egress", "SecurityGroupEgress")):
            for i, entry in enumerate(p.get(key) or []):
                rules.append(
                    _rule(
                        env,
                        s,
                        gid,
                        direction,
                        entry,
                        f"{s.display_name}/{lid} {direction}[{i}] ({entry.get('Description', '')})",
                    )
                )
    for t, direction in (("AWS::EC2::SecurityGroupIngress", "ingress"), ("AWS::EC2::SecurityGroupEgress", "egress")):
        for s, lid, r in env.resources(t):
            p = env.props(r)
            rules.append(
                _rule(
                    env,
                    s,
                    env.value(s, p["GroupId"]),
                    direction,
                    p,
                    f"{s.display_name}/{lid} ({p.get('Description', '')})",
                )
            )
    for s, lid, _ in env.resources("AWS::EKS::Cluster"):
        g = env.attr(s, lid, "ClusterSecurityGroupId")
        rules += [
            Rule(g, "ingress", "-1", (0, 65535), g, None, f"{EKS_DEFAULT_RULES}: inbound all from itself"),
            Rule(g, "egress", "-1", (0, 65535), None, "0.0.0.0/0", f"{EKS_DEFAULT_RULES}: outbound all to 0.0.0.0/0"),
            Rule(g, "egress", "-1", (0, 65535), g, None, f"{EKS_DEFAULT_RULES}: outbound all to itself (EFA)"),
        ]
    return rules


@dataclass(frozen=True)
class Member:
    """One network attachment: its security groups and the CIDRs of its subnets."""

    label: str
    groups: tuple[str, ...]
    cidrs: tuple[str, ...]
    subnets: tuple[str, ...]


def _subnet_cidrs(env: Env) -> dict[str, str]:
    return {
        env.attr(s, lid, "Ref"): env.value(s, env.props(r).get("CidrBlock"))
        for s, lid, r in env.resources("AWS::EC2::Subnet")
    }


def attachments(env: Env) -> dict[str, list[Member]]:
    cidr_of = _subnet_cidrs(env)

    def member(label: str, groups: Iterable[str], subnets: Iterable[str]) -> Member:
        subnets = tuple(subnets)
        return Member(label, tuple(groups), tuple(str(cidr_of.get(x, "{?}")) for x in subnets), subnets)

    def vpc_member(s: Stack, label: str, vpc_config: dict[str, Any], subnets_key: str = "SubnetIds") -> Member:
        """A member placed by a VPC config's SecurityGroupIds and subnets (their key varies by type)."""
        return member(
            label,
            env.value(s, vpc_config.get("SecurityGroupIds") or []),
            env.value(s, vpc_config.get(subnets_key) or []),
        )

    out: dict[str, list[Member]] = {
        a: []
        for a in (
            "system-nodes",
            "hyperpod-nodes",
            "control-plane",
            "fsx",
            "kubectl-handler",
            "gcs-store",
            "amp-scraper",
            "ray-head-pods",
        )
    }
    clusters = {}
    for s, lid, r in env.resources("AWS::EKS::Cluster"):
        p = env.props(r)
        cfg = p.get("ResourcesVpcConfig") or {}
        csg = env.attr(s, lid, "ClusterSecurityGroupId")
        clusters[env.attr(s, lid, "Ref")] = csg
        out["control-plane"].append(
            member(
                f"{s.display_name}/{lid}",
                [csg, *env.value(s, cfg.get("SecurityGroupIds") or [])],
                env.value(s, cfg.get("SubnetIds") or []),
            )
        )
    for s, lid, r in env.resources("AWS::EKS::Nodegroup"):
        p = env.props(r)
        if env.value(s, p.get("NodegroupName")) != SYSTEM_NODEGROUP:
            continue
        if "LaunchTemplate" in p:
            groups: list[str] = ["{launch-template groups: not evaluated}"]
        else:
            # No launch template: EKS gives the nodes only the cluster security group.
            groups = [clusters.get(env.value(s, p.get("ClusterName")), "{?cluster}")]
        out["system-nodes"].append(member(f"{s.display_name}/{lid}", groups, env.value(s, p.get("Subnets") or [])))
    for s, lid, r in env.resources("AWS::SageMaker::Cluster"):
        p = env.props(r)
        base = p.get("VpcConfig") or {}
        for g in p.get("InstanceGroups") or []:
            cfg = g.get("OverrideVpcConfig") or base
            out["hyperpod-nodes"].append(
                vpc_member(s, f"{s.display_name}/{lid} group {g.get('InstanceGroupName')}", cfg, "Subnets")
            )
    for s, lid, r in env.resources("AWS::FSx::FileSystem"):
        out["fsx"].append(vpc_member(s, f"{s.display_name}/{lid}", env.props(r)))
    for s, lid, r in env.resources("AWS::APS::Scraper"):
        eks_source = (env.props(r).get("Source") or {}).get("EksConfiguration") or {}
        out["amp-scraper"].append(vpc_member(s, f"{s.display_name}/{lid}", eks_source))
    for s, lid, r in env.resources("AWS::Lambda::Function"):
        path = s.paths_by_logical_id().get(lid, "")
        if "KubectlProvider/Handler" not in path:
            continue
        out["kubectl-handler"].append(vpc_member(s, f"{s.display_name}/{lid}", env.props(r).get("VpcConfig") or {}))
    # The Ray heads' branch interfaces: the groups of the SecurityGroupPolicy that selects the
    # head pods of the Ray namespace, in the subnets of the system nodes they run on.
    system_subnets = [x for m in out["system-nodes"] for x in m.subnets]
    for s, lid, r in env.resources("Custom::AWSCDK-EKS-KubernetesResource"):
        text = env.value(s, env.props(r).get("Manifest"))
        try:
            objects = json.loads(text) if isinstance(text, str) else []
        except json.JSONDecodeError:
            continue
        for o in objects:
            if isinstance(o, dict) and _selects_ray_heads(o):
                out["ray-head-pods"].append(
                    member(f"{s.display_name}/{lid}", o["spec"]["securityGroups"]["groupIds"], system_subnets)
                )
    subnets_of_group = {
        env.attr(s, lid, "Ref"): env.value(s, env.props(r).get("SubnetIds") or [])
        for s, lid, r in env.resources("AWS::ElastiCache::SubnetGroup")
    }
    for s, lid, r in env.resources("AWS::ElastiCache::ReplicationGroup"):
        p = env.props(r)
        out["gcs-store"].append(
            member(
                f"{s.display_name}/{lid}",
                env.value(s, p.get("SecurityGroupIds") or []),
                subnets_of_group.get(env.value(s, p.get("CacheSubnetGroupName")), []),
            )
        )
    return out


def _selects_ray_heads(obj: dict[str, Any]) -> bool:
    """A SecurityGroupPolicy of the Ray namespace whose pod selector takes KubeRay's head pods
    (``ray.io/node-type: head``) and nothing keyed otherwise."""
    if obj.get("kind") != "SecurityGroupPolicy" or (obj.get("metadata") or {}).get("namespace") != WORKLOADS_NAMESPACE:
        return False
    selector = (obj.get("spec") or {}).get("podSelector") or {}
    labels = selector.get("matchLabels") or {}
    exprs = selector.get("matchExpressions") or []
    keys = set(labels) | {e.get("key") for e in exprs}
    if keys != {"ray.io/node-type"}:
        return False
    return labels.get("ray.io/node-type") == "head" or any(
        e.get("operator") == "In" and "head" in (e.get("values") or []) for e in exprs
    )


def _covers(rule: Rule, protocol: str, ports: tuple[int, int]) -> bool:
    if rule.protocol == "-1":
        return True
    if protocol == "all" or rule.protocol != protocol:
        return False
    return rule.ports[0] <= ports[0] and ports[1] <= rule.ports[1]


def _cidr_holds(cidr: str | None, cidrs: tuple[str, ...]) -> bool:
    if not cidr or not cidrs:
        return False
    try:
        outer = ipaddress.ip_network(cidr)
        return all(ipaddress.ip_network(c).subnet_of(outer) for c in cidrs)  # type: ignore[arg-type]
    except (ValueError, TypeError):
        return False


def _allowing(
    rules: list[Rule],
    direction: str,
    own: Member,
    peer: Member,
    protocol: str,
    ports: tuple[int, int],
    group_only: bool,
) -> Rule | None:
    for r in rules:
        if r.direction != direction or r.group not in own.groups or not _covers(r, protocol, ports):
            continue
        if r.peer_group is not None and r.peer_group in peer.groups:
            return r
        if not group_only and _cidr_holds(r.peer_cidr, peer.cidrs):
            return r
    return None


def check_network(env: Env, flow: F.NetworkFlow, rules: list[Rule], members: dict[str, list[Member]]) -> FlowResult:
    src = members.get(F.PARTS[flow.source].on) or []
    dst = members.get(F.PARTS[flow.destination].on) or []
    what = f"{flow.source} -> {flow.destination} {flow.protocol} {flow.ports[0]}-{flow.ports[1]}"
    if not src or not dst:
        missing = flow.source if not src else flow.destination
        return FlowResult("network", flow.name, what, False, f"{missing}: not found in the templates")
    problems, allowed = [], []
    for a in src:
        for b in dst:
            out = _allowing(rules, "egress", a, b, flow.protocol, flow.ports, flow.group_rules_only)
            inn = _allowing(rules, "ingress", b, a, flow.protocol, flow.ports, flow.group_rules_only)
            if out and inn:
                allowed.append(f"egress {out.source}; ingress {inn.source}")
            else:
                side = "no egress rule" if not out else "no ingress rule"
                problems.append(f"{side} for {a.label} -> {b.label}")
    if flow.destination == "eks-api":
        for s, lid, r in env.resources("AWS::EKS::Cluster"):
            if (
                str(env.value(s, (env.props(r).get("ResourcesVpcConfig") or {}).get("EndpointPrivateAccess"))).lower()
                != "true"
            ):
                problems.append(f"{s.display_name}/{lid}: the private endpoint is off, so in-VPC callers leave the VPC")
    if problems:
        return FlowResult("network", flow.name, what, False, "; ".join(problems))
    return FlowResult("network", flow.name, what, True, " | ".join(sorted(set(allowed))))


def check_denied(flow: F.NetworkFlow, rules: list[Rule], members: dict[str, list[Member]]) -> FlowResult:
    """``flow`` must be refused: no member of the source reaches a member of the destination."""
    src = members.get(F.PARTS[flow.source].on) or []
    dst = members.get(F.PARTS[flow.destination].on) or []
    what = f"{flow.source} -> {flow.destination} {flow.protocol} {flow.ports[0]}-{flow.ports[1]}"
    if not src or not dst:
        missing = flow.source if not src else flow.destination
        return FlowResult("denied", flow.name, what, False, f"{missing}: not found in the templates")
    allowed = []
    for a in src:
        for b in dst:
            out = _allowing(rules, "egress", a, b, flow.protocol, flow.ports, False)
            inn = _allowing(rules, "ingress", b, a, flow.protocol, flow.ports, False)
            if out and inn:
                allowed.append(f"{a.label} -> {b.label}: egress {out.source}; ingress {inn.source}")
    if allowed:
        return FlowResult("denied", flow.name, what, False, " | ".join(sorted(set(allowed))))
    return FlowResult("denied", flow.name, what, True, "no rule pair admits it")


def check_egress(env: Env, flow: F.EgressFlow, rules: list[Rule], members: dict[str, list[Member]]) -> FlowResult:
    what = f"{flow.source} -> AWS {flow.service}"
    src = members.get(F.PARTS[flow.source].on) or []
    if not src:
        return FlowResult("egress", flow.name, what, False, f"{flow.source}: not found in the templates")
    route_table_of: dict[str, str] = {}
    for s, _lid, r in env.resources("AWS::EC2::SubnetRouteTableAssociation"):
        p = env.props(r)
        route_table_of[env.value(s, p["SubnetId"])] = env.value(s, p["RouteTableId"])
    nat_routes: dict[str, str] = {}
    for s, lid, r in env.resources("AWS::EC2::Route"):
        p = env.props(r)
        if p.get("DestinationCidrBlock") == "0.0.0.0/0" and "NatGatewayId" in p:
            nat_routes[env.value(s, p["RouteTableId"])] = f"{s.display_name}/{lid} (default route to NAT)"
    gateways, interfaces = [], []
    for s, lid, r in env.resources("AWS::EC2::VPCEndpoint"):
        p = env.props(r)
        service = str(env.value(s, p.get("ServiceName")))
        if not service.endswith("." + flow.service):
            continue
        if p.get("VpcEndpointType", "Gateway") == "Gateway":
            gateways.append((f"{s.display_name}/{lid}", set(env.value(s, p.get("RouteTableIds") or []))))
        elif str(env.value(s, p.get("PrivateDnsEnabled"))).lower() == "true":
            cidr_of = _subnet_cidrs(env)
            subnets = env.value(s, p.get("SubnetIds") or [])
            interfaces.append(
                Member(
                    f"{s.display_name}/{lid}",
                    tuple(env.value(s, p.get("SecurityGroupIds") or [])),
                    tuple(str(cidr_of.get(x, "{?}")) for x in subnets),
                    tuple(subnets),
                )
            )
    allowed, problems = [], []
    for m in src:
        for subnet in m.subnets:
            table = route_table_of.get(subnet)
            via = [g for g, tables in gateways if table in tables]
            ep = next(
                (
                    e
                    for e in interfaces
                    if _allowing(rules, "egress", m, e, "tcp", (443, 443), False)
                    and _allowing(rules, "ingress", e, m, "tcp", (443, 443), False)
                ),
                None,
            )
            if via:
                allowed.append(f"gateway endpoint {via[0]}")
            elif ep is not None:
                allowed.append(f"interface endpoint {ep.label}")
            elif table in nat_routes:
                allowed.append(nat_routes[table])
            else:
                problems.append(f"subnet {subnet} of {m.label}: no endpoint for {flow.service} and no NAT route")
    if problems:
        return FlowResult("egress", flow.name, what, False, "; ".join(problems))
    return FlowResult("egress", flow.name, what, True, " | ".join(sorted(set(allowed))))
