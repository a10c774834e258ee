"""checkov's Kubernetes checks on every rendered manifest of every environment, the
NetworkPolicies against the Kubernetes schema and what they allow."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from artifacts import pinned
from config import load_environment
from config.facts import names as k8s_names
from manifests import inference as inference
from manifests import k8s, network_policy, security
from manifests import training as training

ENVS = ("dev", "staging", "prod")
CHECKOV = Path(__file__).resolve().parents[2] / ".venv-checkov" / "bin" / "checkov"


def workload_manifests(env: str) -> list[dict]:
    cfg = load_environment(env)
    out = [training.render(cfg), inference.render(cfg)]
    if cfg.inference.llm.enabled:
        out.append(inference.render_llm(cfg))
    return out


def rendered_objects(env: str) -> list[dict]:
    """Every Kubernetes object the workloads side renders for ``env``, pods of the CRDs included."""
    cfg = load_environment(env)
    objs = [security.render_secret_provider_class(cfg), *network_policy.render(cfg)["items"]]
    for m in workload_manifests(env):
        objs += [m, *security.pods_for_review(m)]
    return objs


def run_checkov(directory: Path) -> dict:
    out = subprocess.run(
        [
            str(CHECKOV),
            "--directory",
            str(directory),
            "--framework",
            "kubernetes",
            "--output",
            "json",
            "--skip-download",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={"PATH": "/usr/bin:/bin", "BC_SKIP_MAPPING": "TRUE", "HOME": str(directory)},
    )
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def checkov_results(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("k8s")
    for env in ENVS:
        d = root / env
        d.mkdir()
        for i, obj in enumerate(rendered_objects(env)):
            (d / f"{i:02d}-{obj['kind']}-{obj['metadata']['name']}.yaml").write_text(yaml.safe_dump(obj))
    # A pod with none of the settings: proves the checks run and can fail here.
    canary = root / "canary"
    canary.mkdir()
    (canary / "pod.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "canary", "namespace": "canary"},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            }
        )
    )
    return run_checkov(root)


def test_checkov_kubernetes_checks_pass_on_every_rendered_pod(checkov_results):
    results = checkov_results["results"]
    failed = [(c["check_id"], c["resource"]) for c in results["failed_checks"]]
    assert failed and all(".canary." in r for _, r in failed), [f for f in failed if ".canary." not in f[1]]
    assert {"CKV_K8S_20", "CKV_K8S_22", "CKV_K8S_23"} <= {c for c, _ in failed}  # escalation, RO root, non-root
    # Every Ray pod of every environment was checked (head and workers; HTTPMode has no submitter).
    checked = {c["resource"] for c in results["passed_checks"]}
    for env in ENVS:
        for m in workload_manifests(env):
            for pod in security.pods_for_review(m):
                assert f"Pod.{k8s.NAMESPACE}.{pod['metadata']['name']}" in checked


def test_every_checkov_skip_has_a_reason_in_place(checkov_results):
    skipped = checkov_results["results"]["skipped_checks"]
    assert skipped
    for c in skipped:
        assert c["check_id"] in security.CHECKOV_SKIPS
        assert len(c["check_result"]["suppress_comment"]) > 40


@pytest.mark.parametrize("env", ENVS)
def test_objects_validate_against_the_kubernetes_schema(env):
    """Against the schema of the Kubernetes version the environment runs."""
    version = load_environment(env).eks.kubernetes_version
    for obj in rendered_objects(env):
        if obj["kind"] in ("NetworkPolicy", "Pod"):
            kubernetes_validate.validate(obj, version, strict=True)


def test_network_policy_names_match_the_infrastructure():
    assert network_policy.KUBERAY_NAMESPACE == k8s_names.KUBERAY_NAMESPACE
    assert k8s.NAMESPACE == k8s_names.WORKLOADS_NAMESPACE
    # The pinned chart wherever artifacts/pinned.py finds it (skipped with one line where it cannot).
    chart = pinned.chart_dir("kuberay-operator") / "Chart.yaml"
    assert yaml.safe_load(chart.read_text())["name"] == network_policy.OPERATOR_POD_LABELS["app.kubernetes.io/name"]


@pytest.mark.parametrize("env", ENVS)
def test_policies_select_every_pod_of_each_workload_and_nothing_else(env):
    cfg = load_environment(env)
    policies = network_policy.render(cfg)["items"]
    by_name = {p["metadata"]["name"]: p for p in policies}
    assert by_name["default-deny-ingress"]["spec"] == {"podSelector": {}, "policyTypes": ["Ingress"]}
    for m in workload_manifests(env):
        name, serve = m["metadata"]["name"], m["kind"] == "RayService"
        own = {security.WORKLOAD_LABEL: name}
        internal = by_name[f"{name}-ray-internal"]["spec"]
        assert internal["podSelector"]["matchLabels"] == own
        assert internal["ingress"] == [{"from": [{"podSelector": {"matchLabels": own}}]}]
        for pod in security.pods_for_review(m):
            assert pod["metadata"]["labels"][security.WORKLOAD_LABEL] == name
        op = by_name[f"{name}-from-operator"]["spec"]
        assert op["podSelector"]["matchLabels"] == {**own, "ray.io/node-type": "head"}
        ports = [p["port"] for p in op["ingress"][0]["ports"]]
        # KubeRay 1.7 calls the dashboard only: every RayService excludes its head from Serve,
        # and then the operator sends no proxy health check to 8000 (network_policy.operator_ports).
        assert m["spec"].get("excludeHeadPodFromServeSvc") is (True if serve else None)
        assert ports == [8265]
        assert (f"{name}-serve-ingress" in by_name) is serve
        if serve:
            # Serve clients reach the pods the Serve Service routes to: the workers.
            selector = by_name[f"{name}-serve-ingress"]["spec"]["podSelector"]["matchLabels"]
            assert selector == {**own, "ray.io/node-type": "worker"}
    # No rule admits another namespace except the operator's and labelled Serve clients on 8000.
    for p in policies:
        for rule in p["spec"].get("ingress", []):
            for peer in rule["from"]:
                if "namespaceSelector" in peer:
                    ns = peer["namespaceSelector"]["matchLabels"]
                    if ns == {"kubernetes.io/metadata.name": "kuberay-system"}:
                        assert peer["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "kuberay-operator"}
                    else:
                        assert ns == {network_policy.SERVE_CLIENT_LABEL: "true"}
                        assert rule["ports"] == [{"protocol": "TCP", "port": 8000}]


def test_the_operator_reaches_serve_on_the_head_only_where_the_head_serves():
    """KubeRay 1.7 probes a RayService head's Serve proxy only when the head is in the Serve
    Service (rayservice_controller.go:2104-2106 at v1.7.0); the dashboard it calls always."""
    assert network_policy.operator_ports(serve=False, head_serves=False) == (8265,)
    assert network_policy.operator_ports(serve=True, head_serves=False) == (8265,)
    assert network_policy.operator_ports(serve=True, head_serves=True) == (8265, 8000)
    (rule,) = network_policy.workload_policies("w", serve=True, head_serves=True)[1]["spec"]["ingress"]
    assert [p["port"] for p in rule["ports"]] == [8265, 8000]
    svc = inference.render(load_environment("dev"))
    assert network_policy.head_serves(svc) is False
    assert network_policy.head_serves({**svc, "spec": {**svc["spec"], "excludeHeadPodFromServeSvc": False}}) is True
    assert network_policy.head_serves(training.render(load_environment("dev"))) is False


@pytest.mark.parametrize("env", ENVS)
def test_every_port_the_policies_open_between_parts_is_a_row_of_the_flow_table(env):
    """The flow table holds what the policies allow, no more: each operator->head port of the
    rendered policies is a POD_FLOWS row, and each row's port is opened by some policy."""
    policies = network_policy.render(load_environment(env))["items"]
    opened = {
        p["port"]
        for pol in policies
        if pol["metadata"]["name"].endswith("-from-operator")
        for rule in pol["spec"]["ingress"]
        for p in rule["ports"]
    }
    rows = {
        lo for _, src, dst, _, (lo, hi), _ in network_policy.POD_FLOWS if (src, dst) == ("kuberay-operator", "ray-head")
    }
    assert opened == rows == {8265}


@pytest.mark.parametrize("env", ENVS)
def test_secret_provider_class_validates_against_the_driver_crd(env):
    """The applied SecretProviderClass against the v1 schema of the CRD the add-on's driver
    (1.6.0) installs: types, required fields and no unknown field (config/versions.py
    SECRETS_STORE_CRDS; skipped with one line where that CRD cannot be had)."""
    import jsonschema

    from artifacts.pinned import secrets_store_crd_dir
    from manifests import crd

    path = secrets_store_crd_dir() / "secrets-store.csi.x-k8s.io_secretproviderclasses.yaml"
    definition = yaml.safe_load(path.read_text())
    assert definition["spec"]["names"]["kind"] == "SecretProviderClass"
    schema = next(v for v in definition["spec"]["versions"] if v["name"] == "v1")["schema"]["openAPIV3Schema"]
    spc = security.render_secret_provider_class(load_environment(env))
    assert spc["apiVersion"] == f"{definition['spec']['group']}/v1"
    assert crd.unknown_fields(spc, schema) == []
    assert list(jsonschema.Draft7Validator(schema).iter_errors(spc)) == []
    broken = {**spc, "spec": {**spc["spec"], "secretObjects": [{"secretName": 1, "data": "x"}]}}
    assert list(jsonschema.Draft7Validator(schema).iter_errors(broken))
