"""The review report's "Kubernetes" section: what runs in the cluster, read from the synthesized
templates (add-ons, Helm releases, manifests the kubectl handler applies, Pod Identity
associations, access entries, the metrics collector, log groups) and from the manifests the
workloads render from the same config (RayJob/RayService pods, NetworkPolicies).

Flags (as the AWS sections flag theirs): cluster-wide RBAC, wildcard RBAC verbs or resources,
cluster-scoped admin access entries, pods whose containers may run as root, escalate privileges
or write their root filesystem, and Services of type LoadBalancer or NodePort.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from review.analysis import FLAG
from review.document import Document
from review.proof import Env

if TYPE_CHECKING:
    from config.environment import EnvironmentConfig
    from review.assembly import Stack

MANIFEST = "Custom::AWSCDK-EKS-KubernetesResource"
HELM = "Custom::AWSCDK-EKS-HelmChart"
RBAC_KINDS = ("ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding")


@dataclass(frozen=True)
class Applied:
    """One Kubernetes object a template applies through the kubectl handler."""

    stack: str
    resource: str
    obj: dict[str, Any]


def applied_objects(stacks: list[Stack]) -> list[Applied]:
    env = Env(stacks)
    out = []
    for s, lid, r in env.resources(MANIFEST):
        text = env.value(s, env.props(r).get("Manifest"))
        try:
            objs = json.loads(text) if isinstance(text, str) else []
        except json.JSONDecodeError:
            objs = []
        out += [Applied(s.display_name, lid, o) for o in objs if isinstance(o, dict)]
    return out


def _name(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta['namespace']}/{meta.get('name')}" if meta.get("namespace") else str(meta.get("name"))


def rbac_rows(objects: list[Applied]) -> list[list[str]]:
    roles: dict[tuple[Any, Any], dict[str, Any]] = {
        (o.obj["kind"], _name(o.obj)): o.obj for o in objects if o.obj.get("kind") in ("ClusterRole", "Role")
    }
    rows = []
    for o in objects:
        kind = o.obj.get("kind")
        if kind not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        ref = o.obj.get("roleRef") or {}
        ns = (o.obj.get("metadata") or {}).get("namespace")
        ref_key = (ref.get("kind"), ref.get("name") if ref.get("kind") == "ClusterRole" else f"{ns}/{ref.get('name')}")
        role = roles.get(ref_key)
        rules = (role or {}).get("rules") or []
        wildcard = any("*" in (r.get("verbs") or []) or "*" in (r.get("resources") or []) for r in rules)
        flags = []
        if kind == "ClusterRoleBinding":
            flags.append(f"{FLAG} cluster-wide")
        if wildcard:
            flags.append(f"{FLAG} wildcard")
        subjects = ", ".join(
            f"{x.get('kind')} {x.get('namespace', '') + '/' if x.get('namespace') else ''}{x.get('name')}"
            for x in o.obj.get("subjects") or []
        )
        rule_text = "; ".join(
            f"{','.join(r.get('verbs') or [])} {','.join(r.get('resources') or r.get('nonResourceURLs') or [])}"
            + (
                f" ({','.join(g or 'core' for g in r.get('apiGroups') or [])})"
                if r.get("apiGroups") is not None
                else ""
            )
            for r in rules
        )
        rows.append(
            [
                "; ".join(flags),
                f"{kind} {_name(o.obj)}",
                subjects,
                f"{ref.get('kind')} {ref.get('name')}",
                rule_text or ("(role not in these templates: a chart or Kubernetes default)" if role is None else ""),
                f"{o.stack}/{o.resource}",
            ]
        )
    return rows


def _security_flags(pod: dict[str, Any]) -> list[str]:
    spec = pod.get("spec") or {}
    pod_ctx = spec.get("securityContext") or {}
    flags = []
    for c in spec.get("containers") or []:
        ctx = c.get("securityContext") or {}
        if not (ctx.get("runAsNonRoot", pod_ctx.get("runAsNonRoot"))):
            flags.append(f"{FLAG} {c['name']}: may run as root")
        if ctx.get("allowPrivilegeEscalation", True) or ctx.get("privileged"):
            flags.append(f"{FLAG} {c['name']}: privilege escalation")
        if not ctx.get("readOnlyRootFilesystem"):
            flags.append(f"{FLAG} {c['name']}: writable root filesystem")
    return flags


def workload_manifests(config: EnvironmentConfig) -> list[dict[str, Any]]:
    from manifests import inference as inference
    from manifests import training as training

    out = [training.render(config), inference.render(config)]
    if config.inference.llm.enabled:
        out.append(inference.render_llm(config))
    return out


def pod_rows(config: EnvironmentConfig) -> list[list[str]]:
    from manifests import security

    rows = []
    for m in workload_manifests(config):
        for pod in security.pods_for_review(m):
            spec = pod["spec"]
            ctx = spec.get("securityContext") or {}
            containers = spec.get("containers") or []
            first = (containers[0].get("securityContext") or {}) if containers else {}
            ports = ", ".join(
                f"{p.get('name', '')} {p['containerPort']}" for c in containers for p in c.get("ports") or []
            )
            rows.append(
                [
                    "; ".join(_security_flags(pod)),
                    f"{m['kind']} {m['metadata']['name']}",
                    pod["metadata"]["name"],
                    spec.get("serviceAccountName", "default"),
                    f"runAsNonRoot {ctx.get('runAsNonRoot', first.get('runAsNonRoot'))}, uid {ctx.get('runAsUser', first.get('runAsUser'))}, "
                    f"allowPrivilegeEscalation {first.get('allowPrivilegeEscalation')}, readOnlyRootFilesystem {first.get('readOnlyRootFilesystem')}, "
                    f"capabilities drop {','.join((first.get('capabilities') or {}).get('drop') or []) or 'none'}",
                    ports or "(none declared; KubeRay adds its defaults)",
                ]
            )
    return rows


def network_policy_rows(config: EnvironmentConfig) -> list[list[str]]:
    from manifests import network_policy

    rows = []
    for p in network_policy.render(config)["items"]:
        spec = p["spec"]
        selector = spec.get("podSelector") or {}
        selected = json.dumps(selector, sort_keys=True) if selector else "every pod"
        rules = spec.get("ingress")
        if not rules:
            allowed = "nothing (deny)"
        else:
            parts = []
            for rule in rules:
                peers = []
                for peer in rule.get("from") or []:
                    if "ipBlock" in peer:
                        peers.append(f"ipBlock {peer['ipBlock']['cidr']}")
                    else:
                        peers.append(json.dumps(peer, sort_keys=True))
                ports = ",".join(str(x["port"]) for x in rule.get("ports") or []) or "all ports"
                parts.append(f"{' or '.join(peers) or 'anywhere'} on {ports}")
            allowed = "; ".join(parts)
        rows.append([_name(p), selected, ", ".join(spec.get("policyTypes") or []), allowed])
    return rows


def kubernetes_section(doc: Document, stacks: list[Stack], config: EnvironmentConfig | None) -> None:
    doc.heading("Kubernetes")
    env = Env(stacks)
    objects = applied_objects(stacks)
    doc.para(
        "What runs in the cluster: add-ons and Helm releases with their pinned versions, what the kubectl "
        "handler applies, who may do what (access entries, RBAC), which IAM role each service account "
        "assumes, the NetworkPolicies and pod security of the Ray workloads, and where metrics and logs go. "
        f"{FLAG} marks cluster-wide or wildcard RBAC, cluster-scoped admin access, and pods that may run as "
        "root, escalate privileges or write their root filesystem."
    )

    doc.heading("Add-ons and Helm releases", 3)
    rows = []
    for s, lid, r in env.resources("AWS::EKS::Addon"):
        p = env.props(r)
        sas = ", ".join(a.get("ServiceAccount", "?") for a in p.get("PodIdentityAssociations") or [])
        rows.append(
            [
                "EKS add-on",
                p.get("AddonName"),
                p.get("AddonVersion"),
                "(add-on's own)",
                sas or "",
                f"{s.display_name}/{lid}",
            ]
        )
    for s, lid, r in env.resources(HELM):
        p = env.props(r)
        rows.append(
            [
                "Helm chart",
                p.get("Chart"),
                p.get("Version"),
                p.get("Namespace"),
                p.get("Repository"),
                f"{s.display_name}/{lid}",
            ]
        )
    doc.table(["Kind", "Name", "Version", "Namespace", "Service accounts / repository", "Resource"], rows)

    doc.heading("Objects applied by the kubectl handler", 3)
    doc.table(
        ["Kind", "Name", "Resource"],
        [[o.obj.get("kind"), _name(o.obj), f"{o.stack}/{o.resource}"] for o in objects],
    )

    doc.heading("Service accounts and their IAM roles", 3)
    rows = []
    for s, lid, r in env.resources("AWS::EKS::PodIdentityAssociation"):
        p = env.props(r)
        rows.append(
            [
                f"{p.get('Namespace')}/{p.get('ServiceAccount')}",
                str(env.value(s, p.get("RoleArn"))),
                f"{s.display_name}/{lid}",
            ]
        )
    for s, lid, r in env.resources("AWS::EKS::Addon"):
        p = env.props(r)
        for a in p.get("PodIdentityAssociations") or []:
            rows.append(
                [
                    f"({p.get('AddonName')})/{a.get('ServiceAccount')}",
                    str(env.value(s, a.get("RoleArn"))),
                    f"{s.display_name}/{lid}",
                ]
            )
    doc.table(["Service account", "IAM role (Pod Identity)", "Resource"], rows)

    doc.heading("Access entries", 3)
    rows = []
    for s, lid, r in env.resources("AWS::EKS::AccessEntry"):
        p = env.props(r)
        for pol in p.get("AccessPolicies") or []:
            scope = (pol.get("AccessScope") or {}).get("Type", "?")
            policy = str(env.value(s, pol.get("PolicyArn"))).rsplit("/", 1)[-1]
            flag = f"{FLAG} cluster admin" if scope == "cluster" and policy.endswith("ClusterAdminPolicy") else ""
            ns = ",".join((pol.get("AccessScope") or {}).get("Namespaces") or [])
            rows.append(
                [
                    flag,
                    str(env.value(s, p.get("PrincipalArn"))),
                    policy,
                    scope + (f" ({ns})" if ns else ""),
                    f"{s.display_name}/{lid}",
                ]
            )
    doc.table(["Flags", "Principal", "Access policy", "Scope", "Resource"], rows)
    doc.para(
        "Not in the templates: HyperPod creates its execution role's entry, and Amazon Managed Prometheus the "
        "managed collector's entry (mapped to the Kubernetes user the collector's ClusterRoleBinding names)."
    )

    doc.heading("RBAC bindings", 3)
    doc.table(["Flags", "Binding", "Subjects", "Role", "Rules", "Resource"], rbac_rows(objects))

    if config is None:
        doc.para(
            "No config/ environment matches these stacks: the Ray workloads' pods and NetworkPolicies are not rendered here."
        )
    else:
        doc.heading("Pod security and ports of the Ray workloads", 3)
        doc.table(
            ["Flags", "Workload", "Pod", "Service account", "Security context", "Container ports"], pod_rows(config)
        )
        doc.heading("NetworkPolicies", 3)
        doc.table(["Policy", "Selects", "Types", "Allows"], network_policy_rows(config))

    doc.heading("Metrics and logs", 3)
    rows = []
    for s, lid, r in env.resources("AWS::APS::Scraper"):
        p = env.props(r)
        blob = (p.get("ScrapeConfiguration") or {}).get("ConfigurationBlob")
        try:
            scrape = json.loads(base64.b64decode(blob)) if isinstance(blob, str) else {}
        except (ValueError, json.JSONDecodeError):
            scrape = {}
        for job in scrape.get("scrape_configs") or []:
            keep = [r["regex"] for r in job.get("relabel_configs") or [] if r.get("action") == "keep"]
            rows.append(
                [
                    "Prometheus scrape job (AMP managed collector)",
                    job.get("job_name"),
                    "keep " + ", ".join(keep),
                    f"{s.display_name}/{lid}",
                ]
            )
    for s, lid, r in env.resources("AWS::APS::RuleGroupsNamespace"):
        data = json.loads(env.props(r).get("Data") or "{}")
        alerts = [x.get("alert") for g in data.get("groups") or [] for x in g.get("rules") or []]
        rows.append(
            [
                "AMP alerting rules",
                env.props(r).get("Name"),
                ", ".join(a for a in alerts if a),
                f"{s.display_name}/{lid}",
            ]
        )
    for s, lid, r in env.resources("AWS::Logs::LogGroup"):
        p = env.props(r)
        name = str(env.value(s, p.get("LogGroupName", "")))
        if name.startswith("/aws/containerinsights/"):
            rows.append(
                [
                    "Container log group",
                    name,
                    f"retention {p.get('RetentionInDays', 'never expires')} days, KMS {'yes' if p.get('KmsKeyId') else f'{FLAG} no'}",
                    f"{s.display_name}/{lid}",
                ]
            )
    doc.table(
        ["What", "Name", "Detail", "Resource"], rows, empty=f"{FLAG} No metrics collector and no container log groups."
    )
