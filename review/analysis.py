"""What a reviewer looks for in a template, extracted generically by resource type.

Every function takes a :class:`~review.assembly.Stack` and returns plain rows; flags are strings
starting with ``FLAG`` so both renderers can highlight them.

One module because it is one extractor: each function reads the same :class:`Stack` rows and
follows the same flag convention, and the report renders them side by side.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from review.assembly import Resource, Stack

FLAG = "⚠"
OPEN_CIDRS = ("0.0.0.0/0", "::/0")


# ---------------------------------------------------------------------------------------------
# Rendering CloudFormation values for humans
# ---------------------------------------------------------------------------------------------


def show(value: Any, limit: int = 160) -> str:
    """A CloudFormation value as short text: Ref/GetAtt/Join/Sub/ImportValue made readable."""
    text = _show(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _show(v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, list):
        return ", ".join(_show(x) for x in v)
    if isinstance(v, dict) and len(v) == 1:
        ((fn, arg),) = v.items()
        if fn == "Ref":
            return "${" + str(arg) + "}"
        if fn == "Fn::GetAtt":
            return "${" + ".".join(arg if isinstance(arg, list) else [str(arg)]) + "}"
        if fn == "Fn::Join" and isinstance(arg, list) and len(arg) == 2:
            return str(arg[0]).join(_show(x) for x in (arg[1] if isinstance(arg[1], list) else [arg[1]]))
        if fn == "Fn::Sub":
            return _show(arg[0] if isinstance(arg, list) else arg)
        if fn == "Fn::ImportValue":
            return "import(" + _show(arg) + ")"
        if fn == "Fn::Select" and isinstance(arg, list) and len(arg) == 2:
            return f"select({arg[0]}, {_show(arg[1])})"
    return json.dumps(v, sort_keys=True, separators=(",", ":"))


def as_list(v: Any) -> list[Any]:
    if v is None:
        return []
    return v if isinstance(v, list) else [v]


def references(value: Any) -> Iterator[tuple[str, str]]:
    """(logical id or import name, kind) for every Ref/GetAtt/ImportValue inside ``value``."""
    if isinstance(value, dict):
        if len(value) == 1:
            ((fn, arg),) = value.items()
            if fn == "Ref" and isinstance(arg, str) and not arg.startswith("AWS::"):
                yield arg, "ref"
                return
            if fn == "Fn::GetAtt":
                target = arg[0] if isinstance(arg, list) else str(arg).split(".")[0]
                yield target, "ref"
                return
            if fn == "Fn::ImportValue" and isinstance(arg, str):
                yield arg, "import"
                return
        for v in value.values():
            yield from references(v)
    elif isinstance(value, list):
        for v in value:
            yield from references(v)


# ---------------------------------------------------------------------------------------------
# Resources by type
# ---------------------------------------------------------------------------------------------


def resources_by_type(stack: Stack) -> list[tuple[str, int]]:
    counts: dict[str, int] = {}
    for r in stack.resources():
        counts[r.type] = counts.get(r.type, 0) + 1
    return sorted(counts.items())


# ---------------------------------------------------------------------------------------------
# IAM
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class IamStatement:
    stack: str
    resource: str  # logical id
    resource_type: str
    document: str  # where in the resource: PolicyDocument, KeyPolicy, AssumeRolePolicyDocument, ...
    sid: str
    effect: str
    principals: str
    actions: str
    resources: str
    conditions: str
    flags: tuple[str, ...]

    def identity(self) -> str:
        """What makes two statements the same for the compare mode (not the resource order)."""
        return json.dumps(
            [self.resource, self.document, self.effect, self.principals, self.actions, self.resources, self.conditions]
        )


def _policy_documents(value: Any, where: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every policy document (a mapping with a Statement list) inside a resource's properties."""
    if isinstance(value, dict):
        if isinstance(value.get("Statement"), (list, dict)):
            yield where or "Policy", value
            return
        for k, v in value.items():
            yield from _policy_documents(v, f"{where}.{k}" if where else k)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _policy_documents(v, f"{where}[{i}]")


def _has_wildcard(value: Any) -> bool:
    if isinstance(value, str):
        return "*" in value
    if isinstance(value, dict) and len(value) == 1 and "Fn::Join" in value:
        return "*" in _show(value)
    if isinstance(value, list):
        return any(_has_wildcard(v) for v in value)
    return False


def _principals(p: Any) -> str:
    if p is None:
        return ""
    if p == "*":
        return "*"
    if isinstance(p, dict):
        return "; ".join(f"{k}: {show(v, 400)}" for k, v in sorted(p.items()))
    return show(p, 400)


def iam_statements(stack: Stack) -> list[IamStatement]:
    out: list[IamStatement] = []
    for r in stack.resources():
        for where, doc in _policy_documents(r.properties):
            for st in as_list(doc.get("Statement")):
                if not isinstance(st, dict):
                    continue
                effect = st.get("Effect", "Allow")
                actions = as_list(st.get("Action")) or as_list(st.get("NotAction"))
                resources = as_list(st.get("Resource")) or as_list(st.get("NotResource"))
                flags: list[str] = []
                if effect == "Allow":
                    if "NotAction" in st:
                        flags.append(f"{FLAG} NotAction (allows everything else)")
                    if any(a == "*" for a in actions):
                        flags.append(f"{FLAG} wildcard action: all actions")
                    elif any(isinstance(a, str) and a.endswith(":*") for a in actions):
                        flags.append(f"{FLAG} wildcard action: whole service")
                    elif _has_wildcard(actions):
                        flags.append(f"{FLAG} wildcard action pattern")
                    if "NotResource" in st:
                        flags.append(f"{FLAG} NotResource")
                    if any(x == "*" for x in resources):
                        flags.append(f"{FLAG} wildcard resource: *")
                    elif _has_wildcard(resources):
                        flags.append(f"{FLAG} wildcard in resource ARN")
                    principal = st.get("Principal")
                    if principal == "*" or (isinstance(principal, dict) and "*" in as_list(principal.get("AWS"))):
                        flags.append(f"{FLAG} any principal" + ("" if st.get("Condition") else " without condition"))
                out.append(
                    IamStatement(
                        stack=stack.display_name,
                        resource=r.logical_id,
                        resource_type=r.type,
                        document=where,
                        sid=str(st.get("Sid", "")),
                        effect=effect,
                        principals=_principals(st.get("Principal")),
                        actions=", ".join(show(a, 200) for a in actions),
                        resources=", ".join(show(x, 200) for x in resources),
                        conditions=show(st.get("Condition"), 300) if st.get("Condition") else "",
                        flags=tuple(flags),
                    )
                )
        if r.type == "AWS::IAM::Role":
            for arn in as_list(r.properties.get("ManagedPolicyArns")):
                text = show(arn)
                flags = (f"{FLAG} *FullAccess managed policy",) if "FullAccess" in text else ()
                out.append(
                    IamStatement(
                        stack.display_name,
                        r.logical_id,
                        r.type,
                        "ManagedPolicyArns",
                        "",
                        "Allow",
                        "",
                        f"(managed policy) {text}",
                        "",
                        "",
                        flags,
                    )
                )
    return out


# ---------------------------------------------------------------------------------------------
# Security groups
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SgRule:
    stack: str
    group: str  # logical id (or reference) of the group the rule belongs to
    rule: str  # logical id of a standalone rule, or "inline"
    direction: str
    protocol: str
    ports: str
    peer: str
    description: str
    flags: tuple[str, ...]

    def identity(self) -> str:
        return json.dumps([self.group, self.direction, self.protocol, self.ports, self.peer])


def _ports(rule: dict[str, Any]) -> str:
    proto = str(rule.get("IpProtocol", "-1"))
    lo, hi = rule.get("FromPort"), rule.get("ToPort")
    if proto in ("-1", "all") or (lo in (None, -1) and hi in (None, -1)):
        return "all"
    if lo == hi:
        return str(lo)
    if lo == 0 and hi == 65535:
        return "all"
    return f"{lo}-{hi}"


def _peer(rule: dict[str, Any], direction: str) -> str:
    for key in ("CidrIp", "CidrIpv6", "SourcePrefixListId", "DestinationPrefixListId"):
        if key in rule:
            return show(rule[key])
    for key in ("SourceSecurityGroupId", "DestinationSecurityGroupId"):
        if key in rule:
            return "sg " + show(rule[key])
    return "?"


def _sg_rule(stack: Stack, group: str, rule_id: str, direction: str, rule: dict[str, Any]) -> SgRule:
    proto = str(rule.get("IpProtocol", "-1"))
    peer = _peer(rule, direction)
    flags: list[str] = []
    if direction == "ingress" and peer in OPEN_CIDRS:
        flags.append(f"{FLAG} open to the internet")
        if proto == "-1" or _ports(rule) == "all":
            flags.append(f"{FLAG} all ports")
    return SgRule(
        stack.display_name,
        group,
        rule_id,
        direction,
        "all" if proto == "-1" else proto,
        _ports(rule),
        peer,
        str(rule.get("Description", "")),
        tuple(flags),
    )


def security_group_rules(stack: Stack) -> list[SgRule]:
    out: list[SgRule] = []
    for r in stack.resources():
        if r.type == "AWS::EC2::SecurityGroup":
            for rule in as_list(r.properties.get("SecurityGroupIngress")):
                out.append(_sg_rule(stack, r.logical_id, "inline", "ingress", rule))
            for rule in as_list(r.properties.get("SecurityGroupEgress")):
                out.append(_sg_rule(stack, r.logical_id, "inline", "egress", rule))
        elif r.type in ("AWS::EC2::SecurityGroupIngress", "AWS::EC2::SecurityGroupEgress"):
            direction = "ingress" if r.type.endswith("Ingress") else "egress"
            out.append(_sg_rule(stack, show(r.properties.get("GroupId")), r.logical_id, direction, r.properties))
    return out


# ---------------------------------------------------------------------------------------------
# Encryption at rest of every data store
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Encryption:
    stack: str
    resource: str
    type: str
    status: str
    key: str
    flags: tuple[str, ...]


def _s3(r: Resource) -> tuple[str, str, list[str]]:
    rules = as_list((r.properties.get("BucketEncryption") or {}).get("ServerSideEncryptionConfiguration"))
    if not rules:
        return (
            "no encryption configured (S3 applies SSE-S3 by default)",
            "",
            [f"{FLAG} unencrypted bucket (no BucketEncryption)"],
        )
    d = rules[0].get("ServerSideEncryptionByDefault") or {}
    algo = d.get("SSEAlgorithm", "?")
    key = show(d.get("KMSMasterKeyID")) if d.get("KMSMasterKeyID") else ""
    status = {"aws:kms": "SSE-KMS", "aws:kms:dsse": "DSSE-KMS", "AES256": "SSE-S3"}.get(algo, algo)
    if rules[0].get("BucketKeyEnabled"):
        status += " (bucket key)"
    flags = (
        []
        if algo.startswith("aws:kms") and key
        else ([f"{FLAG} AWS-managed key"] if algo.startswith("aws:kms") else [])
    )
    return status, key, flags


def _ebs_devices(mappings: Any) -> list[dict[str, Any]]:
    return [m.get("Ebs") for m in as_list(mappings) if isinstance(m, dict) and isinstance(m.get("Ebs"), dict)]


def _ebs_status(devices: list[dict[str, Any]]) -> tuple[str, str, list[str]]:
    if not devices:
        return "no EBS mappings (AMI defaults apply)", "", [f"{FLAG} encryption not set"]
    unencrypted = [d for d in devices if not d.get("Encrypted")]
    keys = sorted({show(d["KmsKeyId"]) for d in devices if d.get("KmsKeyId")})
    if unencrypted:
        return (
            f"{len(unencrypted)} of {len(devices)} volumes without Encrypted",
            ", ".join(keys),
            [f"{FLAG} unencrypted EBS"],
        )
    return "encrypted", ", ".join(keys) or "aws/ebs (AWS-managed)", [] if keys else [f"{FLAG} AWS-managed key"]


def encryption_status(stack: Stack) -> list[Encryption]:
    out: list[Encryption] = []
    for r in stack.resources():
        p = r.properties
        status: tuple[str, str, list[str]] | None = None
        if r.type == "AWS::S3::Bucket":
            status = _s3(r)
        elif r.type == "AWS::FSx::FileSystem":
            if p.get("KmsKeyId"):
                status = ("encrypted at rest (customer-managed key)", show(p["KmsKeyId"]), [])
            else:
                status = ("encrypted at rest (AWS-managed aws/fsx key)", "", [f"{FLAG} no customer-managed key"])
        elif r.type == "AWS::Logs::LogGroup":
            if p.get("KmsKeyId"):
                status = ("KMS", show(p["KmsKeyId"]), [])
            else:
                status = ("CloudWatch Logs service encryption only", "", [f"{FLAG} no KMS key"])
        elif r.type == "AWS::EKS::Cluster":
            cfgs = [c for c in as_list(p.get("EncryptionConfig")) if "secrets" in as_list(c.get("Resources"))]
            if cfgs:
                key = show((cfgs[0].get("Provider") or {}).get("KeyArn"))
                status = ("Kubernetes secrets envelope-encrypted with KMS", key, [])
            else:
                status = (
                    "secrets: no EncryptionConfig (AWS-owned key only)",
                    "",
                    [f"{FLAG} EKS secrets without a customer-managed key"],
                )
        elif r.type == "AWS::EC2::Volume":
            status = _ebs_status([p])
        elif r.type == "AWS::EC2::LaunchTemplate":
            status = _ebs_status(_ebs_devices((p.get("LaunchTemplateData") or {}).get("BlockDeviceMappings")))
        elif r.type == "AWS::EC2::Instance":
            status = _ebs_status(_ebs_devices(p.get("BlockDeviceMappings")))
        elif r.type == "AWS::SageMaker::Cluster":
            for g in as_list(p.get("InstanceGroups")):
                vols = [
                    c.get("EbsVolumeConfig")
                    for c in as_list(g.get("InstanceStorageConfigs"))
                    if c.get("EbsVolumeConfig")
                ]
                keys = sorted({show(v["VolumeKmsKeyId"]) for v in vols if v.get("VolumeKmsKeyId")})
                if not vols:
                    st = (
                        "root volume only (HyperPod encrypts with an AWS-managed key)",
                        "",
                        [f"{FLAG} no customer-managed key"],
                    )
                elif keys:
                    st = (f"{len(vols)} extra EBS volume(s), KMS", ", ".join(keys), [])
                else:
                    st = (f"{len(vols)} extra EBS volume(s), AWS-managed key", "", [f"{FLAG} no customer-managed key"])
                out.append(
                    Encryption(
                        stack.display_name,
                        f"{r.logical_id} group {show(g.get('InstanceGroupName'))}",
                        r.type,
                        st[0],
                        st[1],
                        tuple(st[2]),
                    )
                )
            continue
        elif r.type == "AWS::EFS::FileSystem":
            status = (
                ("encrypted", show(p.get("KmsKeyId", "aws/elasticfilesystem")), [])
                if p.get("Encrypted")
                else ("not encrypted", "", [f"{FLAG} unencrypted"])
            )
        elif r.type == "AWS::DynamoDB::Table":
            sse = p.get("SSESpecification") or {}
            status = (
                ("KMS", show(sse.get("KMSMasterKeyId", "aws/dynamodb")), [])
                if sse.get("SSEEnabled")
                else ("AWS-owned key", "", [f"{FLAG} no customer-managed key"])
            )
        elif r.type == "AWS::SQS::Queue":
            status = (
                ("KMS", show(p["KmsMasterKeyId"]), [])
                if p.get("KmsMasterKeyId")
                else ("SQS-managed SSE", "", [f"{FLAG} no KMS key"])
            )
        elif r.type == "AWS::SNS::Topic":
            status = (
                ("KMS", show(p["KmsMasterKeyId"]), [])
                if p.get("KmsMasterKeyId")
                else ("not encrypted", "", [f"{FLAG} no KMS key"])
            )
        elif r.type == "AWS::ECR::Repository":
            enc = p.get("EncryptionConfiguration") or {}
            status = (enc.get("EncryptionType", "AES256"), show(enc.get("KmsKey", "")), [])
        elif r.type == "AWS::KMS::Key":
            rot = bool(p.get("EnableKeyRotation"))
            status = (
                "key rotation on" if rot else "key rotation off",
                r.logical_id,
                [] if rot else [f"{FLAG} no rotation"],
            )
        if status is not None:
            out.append(Encryption(stack.display_name, r.logical_id, r.type, status[0], status[1], tuple(status[2])))
    return out


# ---------------------------------------------------------------------------------------------
# Internet exposure
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Exposure:
    stack: str
    resource: str
    type: str
    what: str
    flagged: bool


def internet_exposure(stack: Stack) -> list[Exposure]:
    out: list[Exposure] = []
    resources = {r.logical_id: r for r in stack.resources()}
    igws = {lid for lid, r in resources.items() if r.type == "AWS::EC2::InternetGateway"}
    for rule in security_group_rules(stack):
        if rule.direction == "ingress" and rule.peer in OPEN_CIDRS:
            out.append(
                Exposure(
                    stack.display_name,
                    rule.group,
                    "AWS::EC2::SecurityGroup",
                    f"ingress {rule.protocol} {rule.ports} from {rule.peer}",
                    True,
                )
            )
    for lid, r in resources.items():
        p = r.properties
        if r.type == "AWS::EKS::Cluster":
            vpc = p.get("ResourcesVpcConfig") or {}
            public = vpc.get("EndpointPublicAccess", True)  # CloudFormation's default is public
            if public:
                cidrs = as_list(vpc.get("PublicAccessCidrs")) or ["0.0.0.0/0 (default)"]
                wide = any(show(c).startswith(OPEN_CIDRS) for c in cidrs)
                out.append(
                    Exposure(
                        stack.display_name,
                        lid,
                        r.type,
                        "public Kubernetes API endpoint from " + ", ".join(show(c) for c in cidrs),
                        wide,
                    )
                )
        elif r.type == "AWS::S3::Bucket":
            pab = p.get("PublicAccessBlockConfiguration") or {}
            keys = ("BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls", "RestrictPublicBuckets")
            if not all(pab.get(k) for k in keys):
                out.append(Exposure(stack.display_name, lid, r.type, "public access not fully blocked", True))
        elif r.type == "AWS::EC2::Subnet" and p.get("MapPublicIpOnLaunch"):
            out.append(Exposure(stack.display_name, lid, r.type, "assigns public IPs on launch", True))
        elif r.type == "AWS::EC2::Route" and p.get("DestinationCidrBlock") == "0.0.0.0/0":
            targets = {t for t, _ in references(p.get("GatewayId"))}
            if targets & igws or "igw" in show(p.get("GatewayId")).lower():
                out.append(
                    Exposure(
                        stack.display_name,
                        lid,
                        r.type,
                        f"route table {show(p.get('RouteTableId'))} routes 0.0.0.0/0 to an internet gateway (public subnet)",
                        False,
                    )
                )
        elif r.type == "AWS::EC2::NatGateway":
            out.append(
                Exposure(
                    stack.display_name,
                    lid,
                    r.type,
                    "outbound-only internet access (NAT) from " + show(p.get("SubnetId")),
                    False,
                )
            )
        elif (
            r.type == "AWS::ElasticLoadBalancingV2::LoadBalancer"
            and p.get("Scheme", "internet-facing") == "internet-facing"
        ):
            out.append(Exposure(stack.display_name, lid, r.type, "internet-facing load balancer", True))
        elif r.type == "AWS::Lambda::Url" and p.get("AuthType") == "NONE":
            out.append(Exposure(stack.display_name, lid, r.type, "function URL without auth", True))
        elif r.type == "AWS::EC2::LaunchTemplate":
            for ni in as_list((p.get("LaunchTemplateData") or {}).get("NetworkInterfaces")):
                if ni.get("AssociatePublicIpAddress"):
                    out.append(Exposure(stack.display_name, lid, r.type, "instances get a public IP", True))
    for st in iam_statements(stack):
        if any("any principal without condition" in f for f in st.flags):
            out.append(
                Exposure(
                    stack.display_name,
                    st.resource,
                    st.resource_type,
                    f"resource policy allows any principal: {st.actions}",
                    True,
                )
            )
    return out


# ---------------------------------------------------------------------------------------------
# Replacement risks: create-only properties of stateful resources
# ---------------------------------------------------------------------------------------------

# Resource types that hold data or long-lived state (plus anything with DeletionPolicy Retain):
# replacing one loses data or, for the HyperPod cluster, every node.
STATEFUL_TYPES = frozenset(
    {
        "AWS::S3::Bucket",
        "AWS::FSx::FileSystem",
        "AWS::FSx::DataRepositoryAssociation",
        "AWS::KMS::Key",
        "AWS::Logs::LogGroup",
        "AWS::EKS::Cluster",
        "AWS::SageMaker::Cluster",
        "AWS::EC2::Volume",
        "AWS::EFS::FileSystem",
        "AWS::DynamoDB::Table",
        "AWS::RDS::DBInstance",
        "AWS::RDS::DBCluster",
        "AWS::ECR::Repository",
        "AWS::SecretsManager::Secret",
    }
)


@functools.cache
def create_only_properties(resource_type: str, region: str = "us-east-1") -> tuple[str, ...]:
    """JSON pointers (``/properties/A/B``) that force replacement, from the CloudFormation
    resource provider schema shipped with cfn-lint (the registry's own ``createOnlyProperties``)."""
    from cfnlint.schema import PROVIDER_SCHEMA_MANAGER

    try:
        schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema(region, resource_type).schema
    except Exception:  # unknown or custom type: no schema, nothing known
        return ()
    return tuple(schema.get("createOnlyProperties") or ())


def pointer_value(properties: dict[str, Any], pointer: str) -> tuple[bool, Any]:
    """Resolve ``/properties/A/B`` in a resource's Properties; (found, value)."""
    cur: Any = properties
    for part in pointer.split("/")[2:]:
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        else:
            return False, None
    return True, cur


@dataclass(frozen=True)
class ReplacementRisk:
    stack: str
    resource: str
    type: str
    deletion_policy: str
    prop: str
    value: str


def is_stateful(r: Resource) -> bool:
    return r.type in STATEFUL_TYPES or r.deletion_policy in ("Retain", "RetainExceptOnCreate", "Snapshot")


def replacement_risks(stack: Stack) -> list[ReplacementRisk]:
    out: list[ReplacementRisk] = []
    for r in stack.resources():
        if not is_stateful(r):
            continue
        for ptr in create_only_properties(r.type, stack.region if stack.region.count("-") >= 2 else "us-east-1"):
            found, value = pointer_value(r.properties, ptr)
            out.append(
                ReplacementRisk(
                    stack.display_name,
                    r.logical_id,
                    r.type,
                    r.deletion_policy,
                    ptr.removeprefix("/properties/"),
                    show(value, 120) if found else "(not set)",
                )
            )
    return out


# ---------------------------------------------------------------------------------------------
# checkov skips
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckovSkip:
    stack: str
    resource: str
    check: str
    comment: str


def checkov_skips(stack: Stack) -> list[CheckovSkip]:
    return [
        CheckovSkip(stack.display_name, r.logical_id, str(s.get("id", "?")), str(s.get("comment", "")))
        for r in stack.resources()
        for s in r.checkov_skips
    ]


@dataclass(frozen=True)
class LintIgnore:
    stack: str
    resource: str
    rule: str
    reason: str


def cfn_lint_ignores(stack: Stack) -> list[LintIgnore]:
    """Per-resource cfn-lint ignores (``Metadata.cfn-lint.config.ignore_checks``) with the reason
    kept beside them (``Metadata.cfn-lint-reasons``, written by constructs.compliance)."""
    out: list[LintIgnore] = []
    for r in stack.resources():
        meta = r.raw.get("Metadata") or {}
        reasons = meta.get("cfn-lint-reasons") or {}
        for rule in as_list(((meta.get("cfn-lint") or {}).get("config") or {}).get("ignore_checks")):
            out.append(
                LintIgnore(
                    stack.display_name, r.logical_id, str(rule), str(reasons.get(rule, f"{FLAG} no reason given"))
                )
            )
    return out
