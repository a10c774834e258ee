"""The Helm releases against the real charts at the pinned versions: every values key exists in
its chart, and ``helm template`` renders the operator and the device plugins with the scheduling
this app intends, for every environment."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import kubernetes_validate
import pytest
from constructs import chart_pods as cp
from constructs import hyperpod_dependencies as deps

from artifacts import pinned
from config import load_environment, versions
from config.facts.names import (
    HYPERPOD_HEALTH_LABEL,
    INSTANCE_TYPE_LABEL,
    SYSTEM_NODE_SELECTOR,
)
from constructs.helm import ChartRelease
from constructs.kuberay import KUBERAY_RESOURCES
from tests.conftest import template_of

ENVS = ["dev", "staging", "prod"]


@pytest.fixture(scope="module", params=ENVS)
def env(request):
    config = load_environment(request.param)
    return config, cp.chart_pods(config)


def by_name(pods):
    return {p.name: p for p in pods}


def required_terms(pod_spec):
    return pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]


# --- values keys ----------------------------------------------------------------------------


@pytest.mark.parametrize("env_name", ENVS)
def test_every_values_key_exists_in_its_chart(env_name):
    for release in cp.chart_releases(load_environment(env_name)):
        assert cp.unknown_values_keys(release.values, pinned.chart_dir(release.pin.chart)) == [], release.release


def test_a_misspelled_key_is_found():
    chart = pinned.chart_dir("kuberay-operator")
    values = {
        "nodeSelecter": {"a": "b"},  # misspelled top-level key
        "image": {"tagg": "v1"},  # misspelled key inside a map the chart defines
        "watchNamespace": ["x"],  # commented out in values.yaml, read by the templates
        "resources": {"requests": {"cpu": "1"}},  # a Kubernetes object: its inside is not the chart's
        "nodeSelector": {"any-label": "x"},
    }
    assert cp.unknown_values_keys(values, chart) == ["image.tagg", "nodeSelecter"]


def test_a_misspelled_device_plugin_key_is_found():
    values = {**deps.efa_device_plugin_values(load_environment("prod")), "tolerationz": []}
    values["supportedInstanceLabels"] = {**values["supportedInstanceLabels"], "value": ["x"]}
    chart = pinned.chart_dir("aws-efa-k8s-device-plugin")
    assert cp.unknown_values_keys(values, chart) == ["supportedInstanceLabels.value", "tolerationz"]


# --- the releases the stack installs --------------------------------------------------------


@pytest.mark.parametrize("env_name", ENVS)
def test_chart_releases_are_the_ones_the_template_installs(env_name, synthesized):
    _, config, stacks = synthesized(env_name)
    installed = sorted(
        (p["Release"], p["Chart"], p["Version"], p["Namespace"], json.loads(p["Values"]))
        for p in (
            r["Properties"]
            for r in template_of(stacks.cluster).to_json()["Resources"].values()
            if r["Type"] == "Custom::AWSCDK-EKS-HelmChart"
        )
    )
    ours = sorted(
        (r.release, r.pin.chart, r.pin.version, r.namespace, json.loads(json.dumps(dict(r.values))))
        for r in cp.chart_releases(config)
    )
    assert installed == ours


def test_every_pinned_chart_has_a_verified_source():
    for pin in (versions.KUBERAY_OPERATOR, versions.NVIDIA_DEVICE_PLUGIN, versions.EFA_DEVICE_PLUGIN):
        assert pin.version in versions.CHART_SOURCES[pin.chart].folder


def test_a_chart_version_without_its_source_is_refused():
    release = cp.chart_releases(load_environment("dev"))[0]
    other = replace(release, pin=replace(release.pin, version="1.4.2"))
    with pytest.raises(cp.ChartRenderError) as info:
        cp.render_release(other, kubernetes_version="1.33")
    assert str(info.value) == (
        "release kuberay-operator: chart kuberay-operator version 1.4.2 is configured, but the chart rendered "
        "here is version 1.7.0 (config/versions.py CHART_SOURCES)"
    )


def test_helm_errors_name_the_release():
    release = ChartRelease(
        release="kuberay-operator",
        pin=versions.KUBERAY_OPERATOR,
        namespace="kuberay-system",
        values={"image": "quay.io/kuberay/operator:v1.7.0"},
    )
    with pytest.raises(cp.ChartRenderError) as info:
        cp.render_release(release, kubernetes_version="1.33")
    assert str(info.value).startswith(
        "helm template of release kuberay-operator (kuberay-operator 1.7.0) failed: Error: "
    )
    assert "<.Values.image.repository>" in str(info.value)


# --- what they render -------------------------------------------------------------------------


def test_rendered_pods_are_valid_kubernetes_objects(env):
    config, pods = env
    assert pods
    for pod in pods:
        manifest = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
            "spec": dict(pod.pod_spec),
        }
        kubernetes_validate.validate(manifest, config.eks.kubernetes_version, strict=True)


def test_operator_runs_once_on_the_system_nodes_with_its_resources(env):
    config, pods = env
    operator = by_name(pods)["kuberay-operator"]
    assert (operator.kind, operator.replicas, operator.namespace) == ("Deployment", 1, "kuberay-system")
    assert not operator.is_daemonset
    assert operator.pod_spec["nodeSelector"] == SYSTEM_NODE_SELECTOR
    assert "tolerations" not in operator.pod_spec and "affinity" not in operator.pod_spec
    (container,) = operator.pod_spec["containers"]
    assert container["resources"] == KUBERAY_RESOURCES
    repository = (
        f"{config.account}.dkr.ecr.{config.region}.amazonaws.com/quay/kuberay/operator"
        if config.network.images_from_ecr
        else versions.KUBERAY_OPERATOR_IMAGE
    )
    assert container["image"] == f"{repository}:v{config.eks.kuberay_chart_version}"
    # The namespaced RBAC watches the workloads' namespace only.
    assert "--watch-namespace" in container["args"]
    assert container["args"][container["args"].index("--watch-namespace") + 1] == "ray-workloads"


def test_closed_networks_pull_every_chart_image_from_ecr(env):
    """Operator and device plugins as the charts render them: in a closed network every image
    comes from ECR in the environment's region (pull-through cache, the CDK assets repository or
    the EKS registry)."""
    config, pods = env
    images = {
        c["image"] for pod in pods for c in [*pod.pod_spec["containers"], *pod.pod_spec.get("initContainers", [])]
    }
    ecr = re.compile(rf"^\d{{12}}\.dkr\.ecr\.{re.escape(config.region)}\.amazonaws\.com/")
    outside = sorted(i for i in images if not ecr.match(i))
    if config.network.images_from_ecr:
        assert outside == []
        assert {i.split("/", 1)[1].rsplit(":", 1)[0] for i in images} >= {
            "quay/kuberay/operator",
            f"cdk-hnb659fds-container-assets-{config.account}-{config.region}",
            "eks/aws-efa-k8s-device-plugin",
        }
    else:
        assert outside  # dev pulls the operator from quay.io and the NVIDIA plugin from nvcr.io
    efa = [i for i in images if "aws-efa-k8s-device-plugin" in i]
    assert all(i.startswith(f"602401143452.dkr.ecr.{config.region}.amazonaws.com/") for i in efa), efa


def test_nvidia_plugin_only_on_this_environments_gpu_types(env):
    config, pods = env
    plugin = by_name(pods)["nvidia-device-plugin"]
    assert plugin.is_daemonset and plugin.replicas is None and plugin.namespace == "kube-system"
    # Exactly our term: the chart's default affinity (NFD PCI labels, which HyperPod nodes lack) is replaced.
    assert required_terms(plugin.pod_spec) == [
        {
            "matchExpressions": [
                {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": config.gpu_device_plugin_instance_types()}
            ]
        }
    ]
    assert plugin.pod_spec["tolerations"] == deps.hyperpod_node_tolerations()
    assert any(t.get("key") == HYPERPOD_HEALTH_LABEL for t in plugin.pod_spec["tolerations"])
    for container in plugin.pod_spec["containers"]:
        assert container["resources"] == deps.DEVICE_PLUGIN_RESOURCES


def test_nvidia_chart_extra_daemonsets_select_no_node(env):
    """The chart's MPS control daemon only goes where NVIDIA's feature discovery labels MPS;
    this app installs no feature discovery, so it schedules nowhere."""
    _, pods = env
    nvidia = [p for p in pods if p.release == "nvidia-device-plugin"]
    assert {p.name for p in nvidia} == {"nvidia-device-plugin", "nvidia-device-plugin-mps-control-daemon"}
    assert by_name(pods)["nvidia-device-plugin-mps-control-daemon"].pod_spec["nodeSelector"] == {
        "nvidia.com/mps.capable": "true"
    }


def test_efa_plugin_only_on_this_environments_efa_types(env):
    config, pods = env
    efa_types = config.efa_device_plugin_instance_types()
    plugin = [p for p in pods if p.release == "aws-efa-k8s-device-plugin"]
    if not efa_types:
        assert plugin == []
        return
    (plugin,) = plugin
    assert plugin.is_daemonset and plugin.namespace == "kube-system"
    (term,) = required_terms(plugin.pod_spec)
    assert {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": efa_types} in term["matchExpressions"]
    assert {t.get("key") for t in plugin.pod_spec["tolerations"]} >= {HYPERPOD_HEALTH_LABEL, None}
    assert {"operator": "Exists", "effect": "NoSchedule"} in plugin.pod_spec["tolerations"]
    (container,) = plugin.pod_spec["containers"]
    assert container["resources"] == deps.DEVICE_PLUGIN_RESOURCES
