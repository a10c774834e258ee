"""Kubernetes RBAC as the EKS API server evaluates it for one IAM principal, from the synthesized
templates: the principal's ``AWS::EKS::AccessEntry`` (its Kubernetes groups and EKS access
policies with their scope) and the Roles, ClusterRoles and bindings the kubectl handler applies.
``check_kube`` proves each ``constructs.flows.KubeFlow`` (and each fence: a request that must be
denied) against them.

EKS access policies are not readable through the API; their Kubernetes rules are modelled here
from the EKS user guide ("Review access policy permissions"), which lists them. A policy this
module does not know, or a binding to a ClusterRole the templates do not define, counts as
allowing everything, so a fence fails closed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from review.kubernetes import applied_objects
from review.proof import Env, FlowResult

if TYPE_CHECKING:
    from constructs.flows import KubeFlow, KubeRequest
    from review.assembly import Stack

ANY = {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}
_READ = ["get", "list", "watch"]
_WRITE = ["create", "delete", "deletecollection", "patch", "update"]
_VIEW = [
    {
        "apiGroups": [""],
        "resources": [
            "configmaps",
            "endpoints",
            "events",
            "limitranges",
            "namespaces",
            "persistentvolumeclaims",
            "pods",
            "pods/log",
            "pods/status",
            "replicationcontrollers",
            "resourcequotas",
            "serviceaccounts",
            "services",
        ],
        "verbs": _READ,
    },
    {"apiGroups": ["apps", "batch", "autoscaling", "networking.k8s.io", "policy"], "resources": ["*"], "verbs": _READ},
]
# AmazonEKSEditPolicy: the Kubernetes `edit` role's rules, Secrets, pods, exec and service account
# impersonation included (EKS user guide, "Review access policy permissions").
_EDIT = [
    *_VIEW,
    {"apiGroups": [""], "resources": ["secrets"], "verbs": [*_READ, *_WRITE]},
    {
        "apiGroups": [""],
        "resources": [
            "pods",
            "pods/attach",
            "pods/exec",
            "pods/portforward",
            "pods/proxy",
            "configmaps",
            "services",
            "persistentvolumeclaims",
            "replicationcontrollers",
            "serviceaccounts",
        ],
        "verbs": _WRITE,
    },
    {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"]},
    {"apiGroups": ["apps", "batch", "autoscaling", "networking.k8s.io", "policy"], "resources": ["*"], "verbs": _WRITE},
]
ACCESS_POLICY_RULES: dict[str, list[dict[str, Any]]] = {
    "AmazonEKSViewPolicy": _VIEW,
    "AmazonEKSEditPolicy": _EDIT,
    "AmazonEKSAdminPolicy": [ANY],
    "AmazonEKSClusterAdminPolicy": [ANY],
}


@dataclass(frozen=True)
class Grant:
    rule: dict[str, Any]
    namespace: str | None  # None: every namespace
    source: str


def _matches(rule: dict[str, Any], request: KubeRequest) -> bool:
    group, resource, verb = request
    groups, resources, verbs = rule.get("apiGroups") or [], rule.get("resources") or [], rule.get("verbs") or []
    base = resource.split("/", 1)[0]
    return (
        ("*" in groups or group in groups)
        and ("*" in resources or resource in resources or f"{base}/*" in resources)
        and ("*" in verbs or verb in verbs)
    )


def grants_of(stacks: list[Stack], member: str) -> list[Grant]:
    """What the access entries of ``member`` grant: their access policies (in their scope) and
    the rules of every Role or ClusterRole bound to their Kubernetes groups."""
    env = Env(stacks)
    groups: set[str] = set()
    out: list[Grant] = []
    for s, lid, r in env.resources("AWS::EKS::AccessEntry"):
        p = env.props(r)
        if env.value(s, p.get("PrincipalArn")) != member:
            continue
        groups |= set(env.value(s, p.get("KubernetesGroups") or []))
        for policy in p.get("AccessPolicies") or []:
            name = str(env.value(s, policy.get("PolicyArn"))).rsplit("/", 1)[-1]
            scope = policy.get("AccessScope") or {}
            namespaces = env.value(s, scope.get("Namespaces") or []) if scope.get("Type") == "namespace" else [None]
            for rule in ACCESS_POLICY_RULES.get(name, [ANY]):
                out += [Grant(rule, ns, f"{s.display_name}/{lid} access policy {name}") for ns in namespaces]
    objects = [a.obj for a in applied_objects(stacks)]
    roles = {
        (o["kind"], (o.get("metadata") or {}).get("namespace"), o["metadata"]["name"]): o
        for o in objects
        if o.get("kind") in ("Role", "ClusterRole")
    }
    for o in objects:
        if o.get("kind") not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        subjects = o.get("subjects") or []
        if not any(x.get("kind") == "Group" and x.get("name") in groups for x in subjects) and not any(
            x.get("kind") == "User" and x.get("name") == member for x in subjects
        ):
            continue
        ns = (o.get("metadata") or {}).get("namespace") if o["kind"] == "RoleBinding" else None
        ref = o.get("roleRef") or {}
        role = roles.get((ref.get("kind"), ns if ref.get("kind") == "Role" else None, ref.get("name")))
        label = f"{o['kind']} {ns + '/' if ns else ''}{o['metadata']['name']} -> {ref.get('kind')} {ref.get('name')}"
        # A ClusterRole the templates do not define (a built-in one): assume it allows everything.
        rules: list[dict[str, Any]] = (role.get("rules") or []) if role is not None else [ANY]
        for rule in rules:
            out.append(Grant(rule, ns, label))
    return out


def allowing(grants: list[Grant], namespace: str, request: KubeRequest) -> list[str]:
    return sorted({g.source for g in grants if g.namespace in (None, namespace) and _matches(g.rule, request)})


def check_kube(stacks: list[Stack], flow: KubeFlow, grants: list[Grant] | None = None) -> FlowResult:
    grants = grants_of(stacks, flow.member) if grants is None else grants
    shown = ", ".join(f"{v} {(g + '/') if g else ''}{r}" for g, r, v in flow.requests)
    what = f"{flow.member} in {flow.namespace}: {'' if flow.allowed else 'never '}{shown}"
    if flow.allowed:
        missing = [r for r in flow.requests if not allowing(grants, flow.namespace, r)]
        if missing:
            return FlowResult(
                "kubernetes",
                flow.name,
                what,
                False,
                "nothing grants " + ", ".join(f"{v} {(g + '/') if g else ''}{r}" for g, r, v in missing),
            )
        sources = sorted({s for r in flow.requests for s in allowing(grants, flow.namespace, r)})
        return FlowResult("kubernetes", flow.name, what, True, "; ".join(sources))
    for request in flow.requests:
        by = allowing(grants, flow.namespace, request)
        if by:
            return FlowResult("kubernetes", flow.name, what, False, f"allowed by {', '.join(by)}")
    return FlowResult("kubernetes", flow.name, what, True, "no access policy or binding grants it")
