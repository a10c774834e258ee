"""manifests/ha.py: gcsFaultToleranceOptions of every RayService (KubeRay 1.7 CRD and
the operator's own validation rules), the token's SecretProviderClass, the PodDisruptionBudgets."""

from __future__ import annotations

import json

import kubernetes_validate
import pytest

from config import ConfigError, load_environment
from config.facts.names import GCS_STORE_SECRET, gcs_store_secret_name
from manifests import crd, disruption_budgets, ha, security
from manifests import inference as manifest
from manifests.network_policy import NODE_TYPE_LABEL

ENVS = ("dev", "staging", "prod")


def config(env: str, *, csi: bool = True):
    cfg = load_environment(env)
    return cfg.model_copy(update={"eks": cfg.eks.model_copy(update={"ray_token_auth": csi})})


def services(cfg) -> list[dict]:
    return [manifest.render(cfg)] + ([manifest.render_llm(cfg)] if cfg.inference.llm.enabled else [])


def test_without_the_store_rendering_its_secret_provider_class_is_a_clear_error():
    with pytest.raises(ConfigError) as err:
        ha.render_secret_provider_class(config("dev", csi=False))
    assert err.value.errors == [
        "inference.gcs_fault_tolerance.enabled: null with eks.ray_token_auth: false in dev.yaml leaves GCS fault "
        "tolerance off, so there is no store token to sync; set enabled: true or null, with "
        "eks.ray_token_auth: true, to render it"
    ]


@pytest.mark.parametrize("env", ENVS)
def test_every_rayservice_has_gcs_fault_tolerance(env):
    cfg = config(env)
    assert cfg.gcs_fault_tolerance
    for m in services(cfg):
        assert crd.validate(m) == []
        spec = m["spec"]["rayClusterConfig"]
        assert spec["gcsFaultToleranceOptions"] == {
            "redisAddress": "rediss://ray-gcs-store.ray-workloads.svc.cluster.local:6380",
            "redisPassword": {"valueFrom": {"secretKeyRef": {"name": GCS_STORE_SECRET, "key": "auth_token"}}},
        }
        head = spec["headGroupSpec"]
        # What KubeRay 1.7 rejects next to gcsFaultToleranceOptions (utils/validation.go).
        assert "redis-password" not in head.get("rayStartParams", {})
        env_names = {e["name"] for e in head["template"]["spec"]["containers"][0].get("env", [])}
        assert not env_names & {
            "RAY_REDIS_ADDRESS",
            "REDIS_PASSWORD",
            "REDIS_USERNAME",
            "RAY_external_storage_namespace",
        }
        assert "ray.io/external-storage-namespace" not in m["metadata"].get("annotations", {})
        # The head mounts the CSI volume that keeps the token's Secret synced; workers need no token.
        volumes = {v["name"]: v for v in head["template"]["spec"]["volumes"]}
        assert volumes["ray-gcs-store-auth"]["csi"]["volumeAttributes"] == {
            "secretProviderClass": ha.SECRET_PROVIDER_CLASS
        }
        mounts = [x["name"] for x in head["template"]["spec"]["containers"][0]["volumeMounts"]]
        assert mounts.count("ray-gcs-store-auth") == 1
        for group in spec["workerGroupSpecs"]:
            assert "ray-gcs-store-auth" not in {v["name"] for v in group["template"]["spec"].get("volumes", [])}


@pytest.mark.parametrize("env", ENVS)
def test_no_fault_tolerance_without_the_csi_driver(env):
    for m in services(config(env, csi=False)):
        assert "gcsFaultToleranceOptions" not in m["spec"]["rayClusterConfig"]
        assert crd.validate(m) == []


def test_a_misspelled_option_fails_the_crd_check():
    m = manifest.render(config("dev"))
    m["spec"]["rayClusterConfig"]["gcsFaultToleranceOptions"]["redisAdress"] = "x"
    m["spec"]["rayClusterConfig"]["gcsFaultToleranceOptions"]["backend"] = "etcd"
    problems = crd.validate(m)
    assert "unknown field spec.rayClusterConfig.gcsFaultToleranceOptions.redisAdress" in problems
    assert any("gcsFaultToleranceOptions.backend" in p and "etcd" in p for p in problems), problems


@pytest.mark.parametrize("env", ENVS)
def test_secret_provider_class_syncs_the_token_the_store_uses(env):
    cfg = config(env)
    spc = ha.render_secret_provider_class(cfg)
    assert spc["metadata"]["name"] == ha.SECRET_PROVIDER_CLASS != security.SECRET_PROVIDER_CLASS
    assert spc["metadata"]["labels"]["app.kubernetes.io/component"] == "gcs-store"
    (obj,) = json.loads(spc["spec"]["parameters"]["objects"])
    assert obj == {
        "objectName": gcs_store_secret_name(cfg.name_prefix),
        "objectType": "secretsmanager",
        "objectAlias": "auth_token",
    }
    assert spc["spec"]["parameters"]["usePodIdentity"] == "true"
    assert spc["spec"]["secretObjects"] == [
        {"secretName": GCS_STORE_SECRET, "type": "Opaque", "data": [{"objectName": "auth_token", "key": "auth_token"}]}
    ]


@pytest.mark.parametrize("env", ENVS)
def test_disruption_budgets_validate_and_select_each_services_pods(env):
    cfg = config(env)
    budgets = disruption_budgets.render_disruption_budgets(cfg)["items"]
    for b in budgets:
        kubernetes_validate.validate(b, cfg.eks.kubernetes_version, strict=True)
    by_name = {b["metadata"]["name"]: b for b in budgets}
    for m in services(cfg):
        name = m["metadata"]["name"]
        for role, node_type, template in (
            ("head", "head", m["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]),
            ("serve", "worker", m["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]),
        ):
            spec = by_name.pop(f"{name}-{role}")["spec"]
            assert spec["maxUnavailable"] == 1 and spec["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
            selector = spec["selector"]["matchLabels"]
            # Our label is on the template; KubeRay adds ray.io/node-type to every pod it creates.
            assert selector == {security.WORKLOAD_LABEL: name, NODE_TYPE_LABEL: node_type}
            assert template["metadata"]["labels"][security.WORKLOAD_LABEL] == name
    assert by_name == {}
