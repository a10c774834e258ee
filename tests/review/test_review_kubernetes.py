"""The review report's Kubernetes section, from every environment's synthesized templates and the
manifests its config renders, and in the report `make synth` writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from config import observability as obs
from config import versions
from manifests import network_policy
from review import kubernetes as k
from review.__main__ import main
from review.assembly import load_assembly
from review.document import Document

ENVS = ["dev", "staging", "prod"]


def section(env: str, synthesized) -> tuple[str, object, list]:
    assembly, config, _ = synthesized(env)
    stacks = load_assembly(assembly.directory).stacks
    doc = Document("r")
    k.kubernetes_section(doc, stacks, config)
    return doc.markdown(), config, stacks


@pytest.mark.parametrize("env", ENVS)
def test_section_lists_addons_charts_rbac_policies_pods_and_wiring(env, synthesized):
    text, config, _ = section(env, synthesized)
    assert "## Kubernetes" in text
    pins = versions.ADDON_VERSIONS[config.eks.kubernetes_version]
    for name in ("vpc-cni", "coredns", "amazon-cloudwatch-observability"):
        assert f"| EKS add-on | {name} | {pins[name]} |" in text
    assert f"| Helm chart | kuberay-operator | {config.eks.kuberay_chart_version} | kuberay-system |" in text
    # The collector's binding is cluster-wide and flagged; its role reads pods only.
    assert (
        "| ⚠ cluster-wide | ClusterRoleBinding aps-collector-role-binding | User aps-collector-user | "
        "ClusterRole aps-collector-role | get,list,watch pods (core) |"
    ) in text
    # Every NetworkPolicy the config renders, the collector's ipBlock among them.
    rows = k.network_policy_rows(config)
    assert len(rows) == len(network_policy.render(config)["items"])
    assert f"ipBlock {config.network.vpc_cidr} on {obs.RAY_METRICS_PORT}" in text
    # Ray pods: hardened, so none flagged.
    pods = k.pod_rows(config)
    assert pods and all(r[0] == "" for r in pods)
    assert "ray-workloads/ray-workloads | arn:aws:iam::" in text
    for kind in obs.CONTAINER_LOG_KINDS:
        group = obs.container_log_group(config.eks_cluster_name, kind)
        assert (
            f"| Container log group | {group} | retention {config.observability.log_retention_days} days, KMS yes |"
            in text
        )
    assert "| Prometheus scrape job (AMP managed collector) | ray | keep head\\|worker, metrics |" in text


def test_a_pod_that_may_run_as_root_is_flagged():
    pod = {"spec": {"containers": [{"name": "c", "securityContext": {"readOnlyRootFilesystem": True}}]}}
    assert k._security_flags(pod) == ["⚠ c: may run as root", "⚠ c: privilege escalation"]
    hardened = {
        "spec": {
            "securityContext": {"runAsNonRoot": True},
            "containers": [
                {"name": "c", "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True}}
            ],
        }
    }
    assert k._security_flags(hardened) == []


def test_wildcard_rbac_is_flagged():
    role = {
        "kind": "Role",
        "metadata": {"name": "r", "namespace": "n"},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}],
    }
    binding = {
        "kind": "RoleBinding",
        "metadata": {"name": "b", "namespace": "n"},
        "roleRef": {"kind": "Role", "name": "r"},
        "subjects": [{"kind": "User", "name": "u"}],
    }
    rows = k.rbac_rows([k.Applied("S", "R", role), k.Applied("S", "R", binding)])
    assert rows[0][0] == "⚠ wildcard"


def test_report_of_make_synth_has_the_kubernetes_section(synthesized, tmp_path: Path):
    assembly, _, _ = synthesized("dev")
    assert main([str(assembly.directory), "--out", str(tmp_path), "--no-diagram"]) == 0
    text = (tmp_path / "dev.md").read_text()
    assert "## Kubernetes" in text and "### NetworkPolicies" in text and "### Metrics and logs" in text
