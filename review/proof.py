"""What the flow checks (review/flows.py, review/rbac.py) and the Kubernetes view
(review/kubernetes.py) share: the stacks of one environment with CloudFormation intrinsics
resolved (``Env``), and one flow's result (``FlowResult``)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from review.assembly import Stack


@dataclass(frozen=True)
class FlowResult:
    kind: str  # network, egress, access
    name: str
    what: str
    ok: bool
    detail: str  # what allows it, or why nothing does


class Env:
    """The stacks of one environment, with intrinsics resolved to comparable strings: a
    resource's unknown physical ID is ``{Stack/LogicalId}``, and ARNs are built around it."""

    def __init__(self, stacks: list[Stack]):
        self.stacks = stacks
        self.exports: dict[str, tuple[Stack, Any]] = {}
        for s in stacks:
            for o in (s.template.get("Outputs") or {}).values():
                name = (o.get("Export") or {}).get("Name")
                if isinstance(name, str):
                    self.exports[name] = (s, o.get("Value"))
        self.account = stacks[0].account if stacks else ""
        self.region = stacks[0].region if stacks else ""

    def resources(self, type_: str | None = None) -> Iterable[tuple[Stack, str, dict[str, Any]]]:
        for s in self.stacks:
            for lid, r in (s.template.get("Resources") or {}).items():
                if type_ is None or r.get("Type") == type_:
                    yield s, lid, r

    def props(self, r: dict[str, Any]) -> dict[str, Any]:
        return r.get("Properties") or {}

    # -- values -------------------------------------------------------------------------------

    def value(self, stack: Stack, v: Any) -> Any:
        if isinstance(v, (str, int, float, bool)) or v is None:
            return v if not isinstance(v, bool) else str(v).lower()
        if isinstance(v, list):
            out: list[Any] = []
            for x in v:
                out.append(self.value(stack, x))
            return out
        if isinstance(v, dict) and len(v) == 1:
            ((fn, arg),) = v.items()
            if fn == "Ref":
                return self._pseudo(stack, arg) if arg.startswith("AWS::") else self.attr(stack, arg, "Ref")
            if fn == "Fn::GetAtt":
                lid, att = arg if isinstance(arg, list) else str(arg).split(".", 1)
                return self.attr(stack, lid, att)
            if fn == "Fn::Join":
                sep, items = arg
                return sep.join(str(self.value(stack, x)) for x in self.value(stack, items) if x is not None)
            if fn == "Fn::ImportValue":
                name = self.value(stack, arg)
                if name in self.exports:
                    other, val = self.exports[name]
                    return self.value(other, val)
                return "{import:" + str(name) + "}"
            if fn == "Fn::Select":
                i, items = arg
                items = self.value(stack, items)
                return items[int(i)] if isinstance(items, list) and int(i) < len(items) else "{?}"
            if fn == "Fn::Split":
                sep, s = arg
                return str(self.value(stack, s)).split(sep)
            if fn == "Fn::Sub":
                text = arg if isinstance(arg, str) else arg[0]
                return re.sub(
                    r"\$\{([^}]+)\}",
                    lambda m: str(
                        self.value(
                            stack,
                            {"Ref": m.group(1)} if "." not in m.group(1) else {"Fn::GetAtt": m.group(1).split(".", 1)},
                        )
                    ),
                    text,
                )
        if isinstance(v, dict):
            return {k: self.value(stack, x) for k, x in v.items()}
        return "{?}"

    def _pseudo(self, stack: Stack, name: str) -> Any:
        return {
            "AWS::Region": stack.region,
            "AWS::AccountId": stack.account,
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::StackName": stack.display_name,
            "AWS::NoValue": None,
        }.get(name, "{" + name + "}")

    def attr(self, stack: Stack, lid: str, att: str) -> str:
        r = (stack.template.get("Resources") or {}).get(lid)
        token = "{" + f"{stack.display_name}/{lid}" + "}"
        if r is None:
            return token
        t, p = r.get("Type"), self.props(r)
        acct, region = stack.account, stack.region
        if t == "AWS::S3::Bucket":
            name = self.value(stack, p["BucketName"]) if "BucketName" in p else token
            return {"Ref": name, "Arn": f"arn:aws:s3:::{name}"}.get(att, f"{token}.{att}")
        if t == "AWS::IAM::Role":
            name = self.value(stack, p["RoleName"]) if "RoleName" in p else token
            path = p.get("Path", "/")
            return {"Ref": name, "Arn": f"arn:aws:iam::{acct}:role{path}{name}"}.get(att, f"{token}.{att}")
        if t == "AWS::KMS::Key":
            return {"Ref": token, "KeyId": token, "Arn": f"arn:aws:kms:{region}:{acct}:key/{token}"}.get(
                att, f"{token}.{att}"
            )
        if t == "AWS::Logs::LogGroup":
            name = self.value(stack, p["LogGroupName"]) if "LogGroupName" in p else token
            return {"Ref": name, "Arn": f"arn:aws:logs:{region}:{acct}:log-group:{name}:*"}.get(att, f"{token}.{att}")
        if t == "AWS::EC2::VPC" and att == "CidrBlock":
            return self.value(stack, p.get("CidrBlock"))
        if t == "AWS::EC2::SecurityGroup" and att in ("GroupId", "Ref"):
            return token
        if t == "AWS::SecretsManager::Secret":
            # Secrets Manager appends a hyphen and six random characters to the name.
            name = self.value(stack, p["Name"]) if "Name" in p else token
            arn = f"arn:aws:secretsmanager:{region}:{acct}:secret:{name}-Rnd6Ch"
            return {"Ref": arn, "Id": arn}.get(att, f"{token}.{att}")
        if t == "AWS::EKS::Cluster":
            name = self.value(stack, p["Name"]) if "Name" in p else token
            return {"Ref": name, "Arn": f"arn:aws:eks:{region}:{acct}:cluster/{name}"}.get(att, f"{token}.{att}")
        return token if att == "Ref" else f"{token}.{att}"

    def find_by_attr(self, type_: str, att: str, value: str) -> tuple[Stack, str, dict[str, Any]] | None:
        for s, lid, r in self.resources(type_):
            if self.attr(s, lid, att) == value:
                return s, lid, r
        return None
