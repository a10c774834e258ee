"""The IAM/KMS checks of the flow table (``constructs/access_flows.py``, ``constructs/team_flows.py``):
identity policies with key policies, bucket policies and trust policies, conditions included
(``review/policy.py``), over the template JSON."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from constructs import flows as F

from config.facts.names import SYSTEM_NODEGROUP
from review.assembly import Stack
from review.network_flows import attachments
from review.policy import Principal, Request, Statement, evaluate, resource_types, statements_of
from review.proof import Env, FlowResult

if TYPE_CHECKING:
    from config.environment import EnvironmentConfig

FSX_S3_SLR = "arn:aws:iam::{account}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_{fs}"

# Who assumes each role, and with which actions (trust policies).
TRUST = {
    "hyperpod-execution-role": ("sagemaker.amazonaws.com", ("sts:AssumeRole",)),
    "system-node-role": ("ec2.amazonaws.com", ("sts:AssumeRole",)),
    "workloads-role": ("pods.eks.amazonaws.com", ("sts:AssumeRole", "sts:TagSession")),
    "team-role": ("pods.eks.amazonaws.com", ("sts:AssumeRole", "sts:TagSession")),
    "fsx-csi-role": ("pods.eks.amazonaws.com", ("sts:AssumeRole", "sts:TagSession")),
    "flow-log-role": ("vpc-flow-logs.amazonaws.com", ("sts:AssumeRole",)),
    "cloudwatch-agent-role": ("pods.eks.amazonaws.com", ("sts:AssumeRole", "sts:TagSession")),
}
# Service principals that act on their own behalf (no role of the templates).
SERVICE_PRINCIPALS = {
    "logs-service": "logs.{region}.amazonaws.com",
    "aps-service": "aps.amazonaws.com",
    "events-service": "events.amazonaws.com",
}

# Secrets Manager secrets found by name (flow.target), and the KMS keys they name.
_SECRETS_ONLY = ("ray-auth-secret", "gcs-store-secret")
_SECRET_KEYS = ("ray-auth-secret-key", "gcs-store-secret-key")
_SECRETS = _SECRETS_ONLY + _SECRET_KEYS


@dataclass(frozen=True)
class RoleRef:
    stack: Stack
    lid: str
    arn: str


class Iam:
    def __init__(self, env: Env, config: EnvironmentConfig) -> None:
        self.env = env
        self.config = config

    def role_by_arn(self, arn: str) -> RoleRef | None:
        hit = self.env.find_by_attr("AWS::IAM::Role", "Arn", arn)
        return RoleRef(hit[0], hit[1], arn) if hit else None

    def principal_role(self, name: str, namespace: str = "") -> tuple[RoleRef | None, str]:
        env = self.env
        if name == "hyperpod-execution-role":
            for s, lid, r in env.resources("AWS::SageMaker::Cluster"):
                arns = {env.value(s, g.get("ExecutionRole")) for g in env.props(r).get("InstanceGroups") or []}
                if len(arns) == 1:
                    return self.role_by_arn(arns.pop()), f"{s.display_name}/{lid} ExecutionRole"
        if name == "system-node-role":
            for s, lid, r in env.resources("AWS::EKS::Nodegroup"):
                p = env.props(r)
                if env.value(s, p.get("NodegroupName")) == SYSTEM_NODEGROUP:
                    return self.role_by_arn(env.value(s, p.get("NodeRole"))), f"{s.display_name}/{lid} NodeRole"
            return None, f"no {SYSTEM_NODEGROUP} managed node group"
        if name in ("workloads-role", "team-role"):
            from manifests import k8s

            ns = namespace or k8s.NAMESPACE
            for s, lid, r in env.resources("AWS::EKS::PodIdentityAssociation"):
                p = env.props(r)
                if env.value(s, p.get("Namespace")) == ns and p.get("ServiceAccount") == k8s.SERVICE_ACCOUNT:
                    return self.role_by_arn(env.value(s, p["RoleArn"])), f"{s.display_name}/{lid}"
            return None, f"no Pod Identity association for {ns}/{k8s.SERVICE_ACCOUNT}"
        if name == "fsx-csi-role":
            for s, lid, r in env.resources("AWS::EKS::Addon"):
                p = env.props(r)
                if p.get("AddonName") == "aws-fsx-csi-driver":
                    for a in p.get("PodIdentityAssociations") or []:
                        return self.role_by_arn(env.value(s, a["RoleArn"])), f"{s.display_name}/{lid}"
            return None, "the aws-fsx-csi-driver add-on has no Pod Identity association"
        if name == "cloudwatch-agent-role":
            for s, lid, r in env.resources("AWS::EKS::Addon"):
                p = env.props(r)
                if p.get("AddonName") == "amazon-cloudwatch-observability":
                    for a in p.get("PodIdentityAssociations") or []:
                        return self.role_by_arn(env.value(s, a["RoleArn"])), f"{s.display_name}/{lid}"
            return None, "no amazon-cloudwatch-observability add-on with a Pod Identity association"
        if name == "flow-log-role":
            for s, lid, r in env.resources("AWS::EC2::FlowLog"):
                return self.role_by_arn(
                    env.value(s, env.props(r).get("DeliverLogsPermissionArn"))
                ), f"{s.display_name}/{lid}"
        return None, f"{name}: not found in the templates"

    def identity_statements(self, role: RoleRef) -> tuple[list[Statement], list[str]]:
        env = self.env
        out: list[Statement] = []
        managed: list[str] = []
        rp = env.props(role.stack.template["Resources"][role.lid])
        for pol in rp.get("Policies") or []:
            out += statements_of(
                env.value(role.stack, pol.get("PolicyDocument")),
                f"{role.stack.display_name}/{role.lid} {pol.get('PolicyName')}",
            )
        managed += [str(env.value(role.stack, m)) for m in rp.get("ManagedPolicyArns") or []]
        role_ref = env.attr(role.stack, role.lid, "Ref")
        for t in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            for s, lid, r in env.resources(t):
                p = env.props(r)
                if role_ref in [env.value(s, x) for x in p.get("Roles") or []]:
                    out += statements_of(env.value(s, p.get("PolicyDocument")), f"{s.display_name}/{lid}")
        return out, managed

    def trust_ok(self, name: str, role: RoleRef) -> str | None:
        service, actions = TRUST[name]
        doc = self.env.value(
            role.stack, self.env.props(role.stack.template["Resources"][role.lid]).get("AssumeRolePolicyDocument")
        )
        trust = statements_of(doc, f"{role.stack.display_name}/{role.lid} trust policy")
        for action in actions:
            req = Request(Principal(service, self.env.account, service=True), action, role.arn)
            if not evaluate(req, resource_policy=trust).allowed:
                return f"the trust policy of {role.lid} does not let {service} {action}"
        return None

    # -- resources ----------------------------------------------------------------------------

    def bucket(self, name: str) -> tuple[Stack, str, dict[str, Any]] | None:
        return self.env.find_by_attr("AWS::S3::Bucket", "Ref", name)

    def _resource_policy(self, type_: str, target_key: str, target: str, document_key: str) -> list[Statement]:
        """The statements of every ``type_`` policy resource whose ``target_key`` is ``target``."""
        env = self.env
        out = []
        for s, lid, r in env.resources(type_):
            p = env.props(r)
            if env.value(s, p.get(target_key)) == target:
                out += statements_of(env.value(s, p.get(document_key)), f"{s.display_name}/{lid}")
        return out

    def bucket_policy(self, name: str) -> list[Statement]:
        return self._resource_policy("AWS::S3::BucketPolicy", "Bucket", name, "PolicyDocument")

    def key_of_bucket(self, name: str) -> tuple[Stack, str, dict[str, Any]] | None:
        hit = self.bucket(name)
        if hit is None:
            return None
        s, _, r = hit
        for rule in self.env.props(r).get("BucketEncryption", {}).get("ServerSideEncryptionConfiguration", []):
            key = rule.get("ServerSideEncryptionByDefault", {}).get("KMSMasterKeyID")
            if key is not None:
                return self.env.find_by_attr("AWS::KMS::Key", "Arn", self.env.value(s, key))
        return None

    def flow_log_group(self) -> tuple[Stack, str, dict[str, Any]] | None:
        for s, _lid, r in self.env.resources("AWS::EC2::FlowLog"):
            p = self.env.props(r)
            if "LogGroupName" in p:
                return self.env.find_by_attr("AWS::Logs::LogGroup", "Ref", self.env.value(s, p["LogGroupName"]))
            return self.env.find_by_attr("AWS::Logs::LogGroup", "Arn", self.env.value(s, p.get("LogDestination")))
        return None

    def container_log_group(self, kind: str) -> tuple[Stack, str, dict[str, Any]] | None:
        from config import observability as obs

        return self.env.find_by_attr(
            "AWS::Logs::LogGroup", "Ref", obs.container_log_group(self.config.eks_cluster_name, kind)
        )

    def alarm_topic(self) -> tuple[Stack, str, dict[str, Any]] | None:
        """The SNS topic that the AMP workspace's alert manager names."""
        env = self.env
        for s, _lid, r in env.resources("AWS::APS::Workspace"):
            definition = str(env.value(s, env.props(r).get("AlertManagerDefinition") or ""))
            for ts, tlid, tr in env.resources("AWS::SNS::Topic"):
                if env.attr(ts, tlid, "Ref") in definition:
                    return ts, tlid, tr
        return None

    def topic_policy(self, arn: str) -> list[Statement]:
        env = self.env
        out = []
        for s, lid, r in env.resources("AWS::SNS::TopicPolicy"):
            p = env.props(r)
            if arn in [env.value(s, t) for t in p.get("Topics") or []]:
                out += statements_of(env.value(s, p.get("PolicyDocument")), f"{s.display_name}/{lid}")
        return out

    def secret(self, name: str) -> tuple[Stack, str, dict[str, Any]] | None:
        for s, lid, r in self.env.resources("AWS::SecretsManager::Secret"):
            if self.env.value(s, self.env.props(r).get("Name")) == name:
                return s, lid, r
        return None

    def secret_policy(self, arn: str) -> list[Statement]:
        return self._resource_policy("AWS::SecretsManager::ResourcePolicy", "SecretId", arn, "ResourcePolicy")

    def key_statements(self, key: tuple[Stack, str, dict[str, Any]]) -> list[Statement]:
        s, lid, r = key
        return statements_of(
            self.env.value(s, self.env.props(r).get("KeyPolicy")), f"{s.display_name}/{lid} key policy"
        )

    # -- one flow -----------------------------------------------------------------------------

    def check(self, flow: F.AccessFlow) -> FlowResult:
        env = self.env
        acct, region = env.account, env.region
        who = (
            flow.principal
            + (f" {flow.namespace}" if flow.namespace else "")
            + (f" {flow.member}" if flow.member else "")
        )
        what = f"{who}: {'' if flow.allowed else 'never '}{', '.join(flow.actions)} on {flow.resource}{(' ' + flow.target) if flow.target else ''}"

        def broken(why: str) -> FlowResult:
            return FlowResult("access", flow.name, what, False, why)

        identity: list[Statement] = []
        if flow.principal == "fsx-s3-service-linked-role":
            fs = next(iter(env.resources("AWS::FSx::FileSystem")), None)
            if fs is None:
                return broken("no FSx file system in the templates")
            # AWS owns the role and its policy, which grants no KMS permission: the key policy must.
            principal = Principal(FSX_S3_SLR.format(account=acct, fs=env.attr(fs[0], fs[1], "Ref")), acct)
        elif flow.principal == "team-member":
            # The platform does not own a member's role: what the templates grant is all a flow
            # may rely on, and a fence must hold whatever the member's own policies allow.
            principal = Principal(flow.member, acct)
            if not flow.allowed:
                identity = statements_of(
                    {"Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]},
                    f"{flow.member}'s own IAM policies (assumed to allow everything)",
                )
        elif flow.principal in SERVICE_PRINCIPALS:
            principal = Principal(SERVICE_PRINCIPALS[flow.principal].format(region=region), acct, service=True)
        else:
            role, where = self.principal_role(flow.principal, flow.namespace)
            if role is None:
                return broken(f"role not found ({where})")
            problem = self.trust_ok(flow.principal, role)
            if problem:
                return broken(problem)
            principal = Principal(role.arn, acct)
            identity, _managed = self.identity_statements(role)

        fill = {"region": region, "account": acct, "bucket_arn": f"arn:aws:s3:::{flow.target}"}
        log_group = self.flow_log_group()
        if log_group is not None:
            fill["log_group_arn"] = env.attr(log_group[0], log_group[1], "Arn").removesuffix(":*")
        if flow.resource in ("container-log-group", "container-log-key"):
            log_group = self.container_log_group(flow.target)
            if log_group is None:
                return broken(f"no {flow.target} container log group in the templates")
            fill["log_group_arn"] = env.attr(log_group[0], log_group[1], "Arn").removesuffix(":*")
        topic = self.alarm_topic() if flow.resource in ("alarm-topic", "alarm-topic-key") else None
        if flow.resource in ("alarm-topic", "alarm-topic-key") and topic is None:
            return broken("no SNS topic named by the AMP workspace's alert manager")
        secret = self.secret(flow.target) if flow.resource in _SECRETS else None
        if secret is not None:
            fill["secret_arn"] = env.attr(secret[0], secret[1], "Ref")
        context = {k: v.format(**fill) for k, v in flow.context}

        requests: list[tuple[Request, list[Statement] | None, bool]] = []
        if flow.resource in _SECRETS and secret is None:
            return broken(f"no Secrets Manager secret named {flow.target} in the templates")
        if flow.resource in ("platform-key", "flow-log-key", *_SECRET_KEYS, "container-log-key", "alarm-topic-key"):
            if flow.resource == "platform-key":
                key = self.key_of_bucket(self.config.bucket_names()["checkpoints"])
            elif flow.resource in _SECRET_KEYS:
                assert secret is not None
                kid = env.props(secret[2]).get("KmsKeyId")
                key = env.find_by_attr("AWS::KMS::Key", "Arn", env.value(secret[0], kid)) if kid is not None else None
                if key is None:
                    return broken(f"{flow.target}: not encrypted with a key of the templates")
            elif flow.resource == "alarm-topic-key":
                assert topic is not None
                kid = env.props(topic[2]).get("KmsMasterKeyId")
                key = env.find_by_attr("AWS::KMS::Key", "Arn", env.value(topic[0], kid)) if kid is not None else None
            else:
                key = None
                if log_group is not None:
                    kid = env.value(log_group[0], env.props(log_group[2]).get("KmsKeyId"))
                    key = env.find_by_attr("AWS::KMS::Key", "Arn", kid)
            if key is None:
                return broken(f"{flow.resource}: not found in the templates")
            arn = env.attr(key[0], key[1], "Arn")
            for a in flow.actions:
                requests.append((Request(principal, a, arn, context), self.key_statements(key), True))
        elif flow.resource in ("s3-object", "s3-bucket"):
            bucket = flow.target.split("/", 1)[0]
            policy = self.bucket_policy(bucket)
            for a in flow.actions:
                requests.append((Request(principal, a, f"arn:aws:s3:::{flow.target}", context), policy, False))
        elif flow.resource == "alarm-topic":
            assert topic is not None
            arn = env.attr(topic[0], topic[1], "Ref")
            requests += [(Request(principal, a, arn, context), self.topic_policy(arn), False) for a in flow.actions]
        elif flow.resource in _SECRETS_ONLY:
            assert secret is not None
            arn = fill["secret_arn"]
            requests += [(Request(principal, a, arn, context), self.secret_policy(arn), False) for a in flow.actions]
        elif flow.resource == "fsx-file-system":
            fs = next(iter(env.resources("AWS::FSx::FileSystem")), None)
            if fs is None:
                return broken("no FSx file system in the templates")
            arn = f"arn:aws:fsx:{region}:{acct}:file-system/{env.attr(fs[0], fs[1], 'Ref')}"
            requests += [(Request(principal, a, arn, context), None, False) for a in flow.actions]
        elif flow.resource in ("flow-log-group", "container-log-group"):
            if log_group is None:
                return broken("the flow log's log group is not in the templates")
            # Log events are written to a stream of the group; CreateLogGroup names the group itself.
            group_arn = env.attr(log_group[0], log_group[1], "Arn").removesuffix(":*")
            requests += [
                (
                    Request(
                        principal,
                        a,
                        group_arn if a == "logs:CreateLogGroup" else group_arn + ":log-stream:flow-probe",
                        context,
                    ),
                    None,
                    False,
                )
                for a in flow.actions
            ]
        elif flow.resource == "ecr-repository":
            # Created by the import itself: no repository policy exists to consult.
            arn = f"arn:aws:ecr:{region}:{acct}:repository/{flow.target}"
            requests += [(Request(principal, a, arn, context), None, False) for a in flow.actions]
        elif flow.resource == "ec2":
            requests += self._ec2_requests(flow, principal, context)
            if not requests:
                return broken("no HyperPod subnets or groups found")
        if not flow.allowed:
            # A fence: every request denied.
            for req, resource_policy, kms in requests:
                result = evaluate(req, identity=identity, resource_policy=resource_policy, kms=kms)
                if result.allowed:
                    return broken(f"{req.action} on {req.resource} is allowed by {', '.join(result.allowed_by)}")
            return FlowResult("access", flow.name, what, True, "denied: " + "; ".join(r.action for r, _, _ in requests))
        for req, resource_policy, kms in requests:
            result = evaluate(req, identity=identity, resource_policy=resource_policy, kms=kms)
            if not result.allowed:
                why = f"denied by {', '.join(result.denied_by)}" if result.denied_by else result.note
                return broken(f"{req.action} on {req.resource}: {why}")
        allowed = sorted(
            {
                label
                for req, rp, kms in requests
                for label in evaluate(req, identity=identity, resource_policy=rp, kms=kms).allowed_by
            }
        )
        return FlowResult("access", flow.name, what, True, "; ".join(allowed))

    def _ec2_requests(
        self, flow: F.AccessFlow, principal: Principal, context: dict[str, str]
    ) -> list[tuple[Request, list[Statement] | None, bool]]:
        env = self.env
        members = attachments(env)["hyperpod-nodes"]
        subnets = sorted({s for m in members for s in m.subnets})
        groups = sorted({g for m in members for g in m.groups})
        base = f"arn:aws:ec2:{env.region}:{env.account}"
        out: list[tuple[Request, list[Statement] | None, bool]] = []
        for action in flow.actions:
            types = resource_types(action)
            for t in flow.resource_types:
                if t not in types:
                    continue
                if t == "network-interface":
                    reqs = [
                        Request(
                            principal,
                            action,
                            f"{base}:network-interface/eni-flow-probe",
                            {**context, "ec2:Subnet": f"{base}:subnet/{s}"},
                        )
                        for s in subnets
                    ]
                elif t == "subnet":
                    reqs = [Request(principal, action, f"{base}:subnet/{s}", context) for s in subnets]
                elif t == "security-group":
                    reqs = [Request(principal, action, f"{base}:security-group/{g}", context) for g in groups]
                elif t == "instance":
                    reqs = [Request(principal, action, f"{base}:instance/i-flow-probe", context)]
                else:
                    continue
                out += [(r, None, False) for r in reqs]
        return out
