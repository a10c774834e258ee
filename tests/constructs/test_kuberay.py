"""The KubeRay operator chart: pinned, newest stable, CRDs, on the system nodes, resources set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
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
    readme = (ROOT.parent / "shared" / "kuberay-crds" / "README.md")
    if not readme.exists():
        readme = Path("/work/shared/kuberay-crds/README.md")
    if not readme.exists():
        pytest.skip("shared/kuberay-crds is not laid out beside this checkout")
    assert f"KubeRay v{versions.KUBERAY_OPERATOR.version}" in readme.read_text()


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
