"""The KubeRay operator chart: pinned, newest stable, CRDs, on the system nodes, resources set."""

from __future__ import annotations

import json
from pathlib import Path

from kubernetes.client import ApiClient, V1ResourceRequirements

from config import load_environment, versions
from constructs.kuberay import kuberay_operator_release, kuberay_operator_values
from tests.conftest import template_of

ROOT = Path(__file__).resolve().parents[2]


def test_pinned_chart_and_repository():
    release = kuberay_operator_release(load_environment("dev").eks)
    assert release.pin.chart == "kuberay-operator"
    assert release.pin.repository == "https://ray-project.github.io/kuberay-helm/"
    assert release.pin.version == versions.KUBERAY_OPERATOR.version == "1.7.0"
    assert release.namespace == "kuberay-system"


def test_pin_matches_the_kuberay_crds_used_by_the_workload_tests():
    """The CRDs the workload manifests are validated against come from the operator chart's commit."""
    chart = versions.CHART_SOURCES["kuberay-operator"]
    assert versions.KUBERAY_CRDS.repository == chart.repository == "ray-project/kuberay"
    assert versions.KUBERAY_CRDS.commit == chart.commit
    assert chart.folder == f"kuberay-operator-{versions.KUBERAY_OPERATOR.version}"
    import yaml

    from artifacts import pinned

    chart_yaml = yaml.safe_load((pinned.chart_dir("kuberay-operator") / "Chart.yaml").read_text())
    assert str(chart_yaml["version"]) == versions.KUBERAY_OPERATOR.version


def test_values_schedule_on_system_nodes_with_resources():
    values = kuberay_operator_values(load_environment("prod").eks)
    assert values["nodeSelector"] == {"eks.amazonaws.com/nodegroup": "system"}
    resources = ApiClient()._ApiClient__deserialize(values["resources"], V1ResourceRequirements)
    assert resources.requests == {"cpu": "100m", "memory": "512Mi"}
    assert resources.limits == {"cpu": "1", "memory": "1Gi"}
    assert values["image"] == {"repository": "quay.io/kuberay/operator", "tag": "v1.7.0"}


def test_operator_rbac_is_namespaced_to_the_workloads():
    values = kuberay_operator_values(load_environment("dev").eks)
    assert values["singleNamespaceInstall"] is True
    assert values["watchNamespace"] == ["ray-workloads"]
    assert values["crNamespacedRbacEnable"] is True


def test_config_version_flows_into_the_release():
    import yaml

    from config import parse_environment

    data = yaml.safe_load((ROOT / "config" / "dev.yaml").read_text()) | {"name": "dev"}
    data["eks"]["kuberay_chart_version"] = "1.4.2"
    release = kuberay_operator_release(parse_environment(data).eks)
    assert release.pin.version == "1.4.2"
    assert release.values["image"]["tag"] == "v1.4.2"


def test_chart_in_template_installs_crds_after_nodes_and_addons(synthesized):
    _, _, stacks = synthesized("dev")
    cluster = stacks.cluster
    res = template_of(cluster).to_json()["Resources"]
    chart_id = cluster.get_logical_id(cluster.kuberay.chart.node.default_child.node.default_child)
    chart = res[chart_id]
    assert chart["Properties"]["Chart"] == "kuberay-operator"
    assert chart["Properties"]["Version"] == "1.7.0"
    assert chart["Properties"].get("SkipCrds", False) is False
    assert json.loads(chart["Properties"]["Values"])["nodeSelector"] == {"eks.amazonaws.com/nodegroup": "system"}
    deps = set(chart["DependsOn"])
    assert cluster.get_logical_id(cluster.eks.system_nodegroup.node.default_child) in deps
    for addon in cluster.eks.addons.values():
        assert cluster.get_logical_id(addon) in deps
    # Its namespaced RBAC lands in the workloads namespace, which must exist first.
    namespace = cluster.workloads.namespace
    while namespace.node.default_child is not None:
        namespace = namespace.node.default_child
    assert cluster.get_logical_id(namespace) in deps


def _grants(rules: list[dict], group: str, resource: str, verb: str) -> bool:
    return any(
        group in r.get("apiGroups", [])
        and (resource in r.get("resources", []) or "*" in r.get("resources", []))
        and (verb in r.get("verbs", []) or "*" in r.get("verbs", []))
        for r in rules
    )


def test_the_autoscaler_of_every_autoscaling_head_gets_its_role_from_the_operator():
    """The RayService heads run KubeRay's autoscaler sidecar as the workloads' service account.
    KubeRay 1.7 creates a Role with AUTOSCALER_ROLE_RULES per autoscaling RayCluster and binds it
    to the head's service account; Kubernetes' escalation check lets the operator create that
    Role only if its own RBAC in the workloads namespace (the real chart, rendered with this
    app's values) holds every rule, and lets it bind it only with create on rolebindings."""
    from constructs.chart_pods import render_release
    from constructs.kuberay import AUTOSCALER_ROLE_RULES
    from manifests import inference as inference
    from manifests import k8s

    cfg = load_environment("prod")
    for svc in [inference.render(cfg)] + ([inference.render_llm(cfg)] if cfg.inference.llm.enabled else []):
        spec = svc["spec"]["rayClusterConfig"]
        assert spec["enableInTreeAutoscaling"] is True
        head = spec["headGroupSpec"]["template"]["spec"]
        assert head["serviceAccountName"] == k8s.SERVICE_ACCOUNT == "ray-workloads"
        assert head["automountServiceAccountToken"] is False  # only the autoscaler sidecar mounts a token
        assert svc["metadata"]["namespace"] == k8s.NAMESPACE

    release = kuberay_operator_release(cfg.eks)
    objects = render_release(release, kubernetes_version=cfg.eks.kubernetes_version)
    roles = {(o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objects if o["kind"] == "Role"}
    bound = [
        roles[(b["metadata"].get("namespace"), b["roleRef"]["name"])]
        for b in objects
        if b["kind"] == "RoleBinding"
        and b["metadata"].get("namespace") == k8s.NAMESPACE
        and b["roleRef"]["kind"] == "Role"
        and any(s["kind"] == "ServiceAccount" and s["namespace"] == release.namespace for s in b["subjects"])
    ]
    operator_rules = [r for role in bound for r in role["rules"]]
    assert operator_rules, "the operator has no Role in the workloads namespace"
    for rule in AUTOSCALER_ROLE_RULES:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert _grants(operator_rules, group, resource, verb), (group, resource, verb)
    for resource in ("roles", "rolebindings"):
        assert _grants(operator_rules, "rbac.authorization.k8s.io", resource, "create"), resource
    # Nothing cluster-wide: the chart's ClusterRoles stay off with singleNamespaceInstall.
    assert not [o for o in objects if o["kind"] in ("ClusterRole", "ClusterRoleBinding")]
