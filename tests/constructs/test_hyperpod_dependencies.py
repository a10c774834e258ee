"""HyperPod node dependencies: device-plugin charts limited to this environment's GPU/EFA types,
tolerating HyperPod's health taint; our own aws-hyperpod manifests, validated offline."""

from __future__ import annotations

import json

import kubernetes_validate
import pytest
from constructs import hyperpod_dependencies as deps
from kubernetes.client import ApiClient, V1Affinity, V1Toleration

from config import catalog, load_environment, versions
from tests.conftest import template_of

# The schema of the Kubernetes version the environments run (config/versions.py).
K8S_SCHEMA_VERSION = versions.newest_kubernetes_version()


def _deserialize(data, klass):
    return ApiClient()._ApiClient__deserialize(data, klass)


@pytest.fixture(scope="module")
def prod():
    return load_environment("prod")


def test_nvidia_affinity_lists_exactly_the_environments_gpu_types(prod):
    values = deps.nvidia_device_plugin_values(prod)
    affinity = _deserialize(values["affinity"], V1Affinity)
    term = affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms[0]
    expr = term.match_expressions[0]
    assert (expr.key, expr.operator) == ("node.kubernetes.io/instance-type", "In")
    assert expr.values == ["ml.g6e.12xlarge", "ml.p5.48xlarge"]
    assert all(t in catalog.gpu_instance_types() for t in expr.values)


def test_device_plugins_tolerate_the_hyperpod_health_taint(prod):
    for values in (deps.nvidia_device_plugin_values(prod), deps.efa_device_plugin_values(prod)):
        tolerations = [_deserialize(t, V1Toleration) for t in values["tolerations"]]
        health = [t for t in tolerations if t.key == "sagemaker.amazonaws.com/node-health-status"]
        assert len(health) == 1 and health[0].operator == "Exists" and health[0].effect is None
        assert any(t.key is None and t.operator == "Exists" and t.effect == "NoSchedule" for t in tolerations)
        assert values["resources"]["requests"] and values["resources"]["limits"]


def test_efa_chart_limited_to_efa_types(prod):
    values = deps.efa_device_plugin_values(prod)
    assert values["supportedInstanceLabels"] == {
        "keys": ["node.kubernetes.io/instance-type"],
        "values": ["ml.g6e.12xlarge", "ml.p5.48xlarge"],
    }
    assert all(t in catalog.efa_instance_types() for t in values["supportedInstanceLabels"]["values"])


def test_releases_pinned_from_public_repositories(prod):
    releases = {r.release: r for r in deps.device_plugin_releases(prod)}
    assert releases["nvidia-device-plugin"].pin == versions.NVIDIA_DEVICE_PLUGIN
    assert releases["nvidia-device-plugin"].pin.repository == "https://nvidia.github.io/k8s-device-plugin"
    assert releases["aws-efa-k8s-device-plugin"].pin == versions.EFA_DEVICE_PLUGIN
    assert releases["aws-efa-k8s-device-plugin"].pin.repository == "https://aws.github.io/eks-charts"


def test_cpu_only_environment_installs_no_device_plugin():
    import copy
    from pathlib import Path

    import yaml

    from config import parse_environment

    data = yaml.safe_load((Path(__file__).resolve().parents[2] / "config" / "dev.yaml").read_text()) | {"name": "dev"}
    data = copy.deepcopy(data)
    data["hyperpod"]["instance_groups"][0]["instance_type"] = "ml.m5.4xlarge"
    del data["training"]["instance_group"]  # checked at load time; a CPU-only cluster names none
    config = parse_environment(data)
    assert deps.device_plugin_releases(config) == []
    kinds = [m["kind"] for m in deps.hyperpod_dependency_manifests(config)]
    assert "DaemonSet" not in kinds  # no GPU node for the health monitoring agent


def test_empty_affinity_is_refused():
    with pytest.raises(ValueError, match="at least one instance type"):
        deps.instance_type_affinity([])


def all_manifests(config):
    return [deps.hyperpod_namespace_manifest(), *deps.hyperpod_dependency_manifests(config)]


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_manifests_validate_against_kubernetes_schemas(env):
    for manifest in all_manifests(load_environment(env)):
        kubernetes_validate.validate(manifest, K8S_SCHEMA_VERSION, strict=True)


def test_validation_catches_a_bad_manifest(prod):
    bad = deps.health_monitoring_agent_manifests(prod)[-1]
    bad["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = 3
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_SCHEMA_VERSION, strict=True)


def test_everything_lives_in_aws_hyperpod(prod):
    for m in all_manifests(prod):
        if m["kind"] in ("ServiceAccount", "DaemonSet"):
            assert m["metadata"]["namespace"] == "aws-hyperpod"
        for subject in m.get("subjects", []):
            if subject["kind"] == "ServiceAccount":
                assert subject["namespace"] == "aws-hyperpod"


def test_deep_health_check_and_job_auto_restart_permissions():
    dhc = {m["kind"]: m for m in deps.deep_health_check_manifests()}
    assert dhc["ServiceAccount"]["metadata"]["name"] == "deep-health-check-service-account"
    assert {(tuple(r["resources"]), tuple(r["verbs"])) for r in dhc["ClusterRole"]["rules"]} == {
        (("nodes",), ("get", "list")),
        (("pods",), ("get", "list", "patch")),
    }
    jar = {m["kind"]: m for m in deps.job_auto_restart_manifests()}
    assert jar["ClusterRoleBinding"]["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "hyperpod-service-linked-role"}
    ]
    verbs = {v for r in jar["ClusterRole"]["rules"] for v in r["verbs"]}
    assert "delete" in verbs and "*" not in verbs


def test_health_monitoring_agent(prod):
    manifests = {m["kind"]: m for m in deps.health_monitoring_agent_manifests(prod)}
    pod = manifests["DaemonSet"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == (
        "767398015722.dkr.ecr.us-east-1.amazonaws.com/hyperpod-health-monitoring-agent:"
        + versions.HEALTH_MONITORING_AGENT_TAG
    )
    assert container["resources"]["limits"] == {"cpu": "500m", "memory": "512Mi"}
    expr = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchExpressions"
    ][0]
    assert expr["values"] == prod.gpu_device_plugin_instance_types()
    assert {t["effect"] for t in pod["tolerations"]} == {"NoSchedule", "NoExecute"}
    assert manifests["ClusterRoleBinding"]["subjects"][0]["name"] == "health-monitoring-agent"


def test_template_applies_them_in_order_after_nodes_and_addons(synthesized):
    _, config, stacks = synthesized("prod")
    cluster = stacks.cluster
    res = template_of(cluster).to_json()["Resources"]
    hp = cluster.hyperpod_node_dependencies

    def lid(construct):
        while construct.node.default_child is not None:
            construct = construct.node.default_child
        return cluster.get_logical_id(construct)

    ns, manifests = res[lid(hp.namespace)], res[lid(hp.manifests)]
    assert json.loads(ns["Properties"]["Manifest"])[0]["metadata"]["name"] == "aws-hyperpod"
    assert lid(hp.namespace) in manifests["DependsOn"]
    applied = json.loads(manifests["Properties"]["Manifest"])
    assert [m["kind"] for m in applied] == [m["kind"] for m in deps.hyperpod_dependency_manifests(config)]
    nodegroup = lid(cluster.eks.system_nodegroup)
    for construct in (hp.namespace, *(c.chart for c in hp.charts)):
        needed = set(res[lid(construct)]["DependsOn"])
        assert nodegroup in needed
        assert {cluster.get_logical_id(a) for a in cluster.eks.addons.values()} <= needed
    # What the HyperPod cluster must depend on.
    assert set(cluster.hyperpod_dependencies) == {hp.namespace, hp.manifests, *hp.charts}


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_deployed_device_plugin_values_name_only_gpu_types(env, synthesized):
    """What CloudFormation hands to Helm, per environment: the GPU/EFA types of its groups."""
    _, config, stacks = synthesized(env)
    charts = {
        r["Properties"]["Chart"]: json.loads(r["Properties"]["Values"])
        for r in template_of(stacks.cluster).to_json()["Resources"].values()
        if r["Type"] == "Custom::AWSCDK-EKS-HelmChart"
    }
    group_gpu_types = sorted({g.instance_type for g in config.hyperpod.instance_groups if g.is_gpu})
    nvidia = charts["nvidia-device-plugin"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert nvidia["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == group_gpu_types
    assert set(charts["aws-efa-k8s-device-plugin"]["supportedInstanceLabels"]["values"]) <= set(
        catalog.efa_instance_types()
    )


# ---------------------------------------------------------------------------------------------
# Our aws-hyperpod objects against AWS's HyperPod dependency chart, rendered at the pinned commit
# ---------------------------------------------------------------------------------------------

# The subcharts of AWS's chart that this app writes itself (each enabled by default there).
AWS_SUBCHARTS = ("deep-health-check", "job-auto-restart", "health-monitoring-agent", "hyperpod-patching")
# Verbs the Kubernetes API server authorizes. AWS's job-auto-restart role also lists "describe",
# which no API request ever asks for (kubectl describe issues get/list): it grants nothing.
KUBERNETES_VERBS = {
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
    "use",
    "bind",
    "escalate",
    "impersonate",
    "approve",
    "sign",
    "attest",
}
# AWS's second agent DaemonSet targets only Neuron (inf/trn) instance types.
NON_NVIDIA_AGENT = "health-monitoring-agent-non-nvidia"


def render_aws_subchart(subchart, region):
    import subprocess

    import yaml

    from artifacts import pinned

    chart = pinned.chart_dir("hyperpod-helm-chart") / "charts" / subchart
    proc = subprocess.run(
        [
            str(pinned.helm_binary()),
            "template",
            "hyperpod-dependencies",
            str(chart),
            "--namespace",
            "aws-hyperpod",
            "--set",
            f"region={region}",
            "--kube-version",
            K8S_SCHEMA_VERSION,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def rbac_triples(role):
    return {
        (g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]
    }


def normalized_subjects(binding):
    """Subjects as the API server stores them: User/Group in the RBAC API group, no namespace."""
    out = set()
    for s in binding["subjects"]:
        if s["kind"] == "ServiceAccount":
            out.add((s["kind"], s.get("apiGroup", ""), s["name"], s["namespace"]))
        else:
            out.add((s["kind"], s.get("apiGroup") or "rbac.authorization.k8s.io", s["name"], None))
    return out


@pytest.fixture(scope="module", params=["dev", "staging", "prod"])
def ours_and_aws(request):
    config = load_environment(request.param)
    ours = {(m["kind"], m["metadata"]["name"]): m for m in all_manifests(config)}
    aws = {}
    for subchart in AWS_SUBCHARTS:
        for m in render_aws_subchart(subchart, config.region):
            aws[(m["kind"], m["metadata"]["name"])] = m
    return config, ours, aws


def test_every_object_of_awss_chart_is_ours_with_the_same_name_and_namespace(ours_and_aws):
    config, ours, aws = ours_and_aws
    wanted = set(aws) - {("DaemonSet", NON_NVIDIA_AGENT)}
    if not config.gpu_device_plugin_instance_types():
        wanted = {k for k in wanted if "health-monitoring-agent" not in k[1]}
    assert wanted - set(ours) == set(), "objects of AWS's HyperPod chart this app does not write"
    for key in wanted:
        namespace = aws[key]["metadata"].get("namespace")
        if key[0] in ("ServiceAccount", "DaemonSet"):
            assert ours[key]["metadata"]["namespace"] == namespace == "aws-hyperpod", key


def test_the_neuron_agent_is_left_out_because_no_group_is_neuron(ours_and_aws):
    config, _, aws = ours_and_aws
    spec = aws[("DaemonSet", NON_NVIDIA_AGENT)]["spec"]["template"]["spec"]
    neuron_types = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ][0]["matchExpressions"][0]["values"]
    assert not {g.instance_type for g in config.hyperpod.instance_groups} & set(neuron_types)


def test_rbac_rules_and_bindings_match_awss_chart(ours_and_aws):
    _, ours, aws = ours_and_aws
    for (kind, name), theirs in aws.items():
        if kind == "ClusterRole" and (kind, name) in ours:
            expected = {t for t in rbac_triples(theirs) if t[2] in KUBERNETES_VERBS}
            assert rbac_triples(ours[(kind, name)]) == expected, name
        if kind == "ClusterRoleBinding" and (kind, name) in ours:
            assert ours[(kind, name)]["roleRef"] == theirs["roleRef"], name
            assert normalized_subjects(ours[(kind, name)]) == normalized_subjects(theirs), name


def test_hyperpod_patching_lets_the_service_linked_role_evict_pods(ours_and_aws):
    _, ours, _ = ours_and_aws
    assert rbac_triples(ours[("ClusterRole", "hyperpod-patching")]) == {
        ("", "pods", "list"),
        ("", "pods/eviction", "create"),
    }
    assert normalized_subjects(ours[("ClusterRoleBinding", "hyperpod-patching")]) == {
        ("User", "rbac.authorization.k8s.io", "hyperpod-service-linked-role", None)
    }


def test_health_monitoring_agent_matches_awss_chart(ours_and_aws):
    config, ours, aws = ours_and_aws
    # Every shipped environment trains on GPUs, so each has the agent to compare.
    assert config.gpu_device_plugin_instance_types(), f"{config.name} has no GPU instance group"
    mine = ours[("DaemonSet", "health-monitoring-agent")]["spec"]["template"]["spec"]
    theirs = aws[("DaemonSet", "health-monitoring-agent")]["spec"]["template"]["spec"]
    (my_container,), (their_container,) = mine["containers"], theirs["containers"]
    # Image, args and command go together: the agent's arguments changed with its image tag.
    for field in ("image", "args", "command", "env", "resources", "imagePullPolicy"):
        assert my_container.get(field) == their_container.get(field), field
    # Same mounts and host paths; read-only where AWS's are, and /var/log written by neither side's choice.
    assert {(m["name"], m["mountPath"], m.get("readOnly", False)) for m in my_container["volumeMounts"]} == {
        (m["name"], m["mountPath"], m.get("readOnly", False)) for m in their_container["volumeMounts"]
    }
    assert sorted(mine["volumes"], key=lambda v: v["name"]) == sorted(theirs["volumes"], key=lambda v: v["name"])
    # Same identity; this app adds allowPrivilegeEscalation: false on top.
    assert their_container["securityContext"].items() <= my_container["securityContext"].items()
    assert mine["serviceAccountName"] == theirs["serviceAccountName"]
    assert mine["tolerations"] == theirs["tolerations"]

    # AWS's agent goes on every NVIDIA type; this app only on its own, all of which AWS lists.
    def types(spec):
        return spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][
            0
        ]["matchExpressions"][0]["values"]

    assert set(types(mine)) <= set(types(theirs))


def test_agent_registry_of_every_region_matches_awss_chart():
    for region in versions.HEALTH_MONITORING_AGENT_REGISTRIES:
        (daemonset,) = [
            m
            for m in render_aws_subchart("health-monitoring-agent", region)
            if m["kind"] == "DaemonSet" and m["metadata"]["name"] == "health-monitoring-agent"
        ]
        assert daemonset["spec"]["template"]["spec"]["containers"][0][
            "image"
        ] == versions.health_monitoring_agent_image(region)
