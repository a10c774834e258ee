"""Token authentication and pod security on every rendered Ray cluster, and the real local proof
that a token-authenticated Ray cluster denies callers without the token."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest
import yaml

from config import ConfigError, load_environment
from manifests import crd, k8s, security
from manifests import inference as inference
from manifests import training as training

ENVS = ("dev", "staging", "prod")


def rendered(env: str, *, token_auth: bool = True) -> list[dict]:
    """Every Ray manifest of ``env``; by default with ``eks.ray_token_auth`` switched on."""
    cfg = load_environment(env)
    cfg = cfg.model_copy(update={"eks": cfg.eks.model_copy(update={"ray_token_auth": token_auth})})
    out = [training.render(cfg), inference.render(cfg)]
    if cfg.inference.llm.enabled:
        out.append(inference.render_llm(cfg))
    return out


def cluster_spec(m: dict) -> dict:
    return m["spec"]["rayClusterSpec"] if m["kind"] == "RayJob" else m["spec"]["rayClusterConfig"]


def pod_specs(m: dict) -> list[dict]:
    """Every pod a manifest makes. The HTTPMode RayJob has no submitter pod (the operator submits
    over HTTP): a submitter template reappearing would be a pod these tests do not see, so it fails here."""
    spec = cluster_spec(m)
    if m["kind"] == "RayJob":
        assert m["spec"]["submissionMode"] == "HTTPMode"
        assert "submitterPodTemplate" not in m["spec"] and "submitterConfig" not in m["spec"]
    return [spec["headGroupSpec"]["template"]["spec"]] + [g["template"]["spec"] for g in spec["workerGroupSpecs"]]


@pytest.mark.parametrize("env", ENVS)
def test_every_cluster_uses_token_auth_from_the_synced_secret(env):
    for m in rendered(env):
        assert cluster_spec(m)["authOptions"] == {"mode": "token", "secretName": "ray-auth-token"}
        assert crd.validate(m) == []
        # Only names travel in the manifest: no token value, no RAY_AUTH_TOKEN literal.
        for pod in pod_specs(m):
            for c in pod["containers"]:
                assert not any(e["name"].startswith("RAY_AUTH") for e in c.get("env", []))


@pytest.mark.parametrize("env", ENVS)
def test_every_ray_pod_mounts_the_secret_provider_class(env):
    """The CSI driver keeps the synced Secret only while a pod mounts the volume."""
    for m in rendered(env):
        spec = cluster_spec(m)
        for pod in [spec["headGroupSpec"]["template"]["spec"]] + [
            g["template"]["spec"] for g in spec["workerGroupSpecs"]
        ]:
            vols = {v["name"]: v for v in pod["volumes"]}
            assert vols["ray-auth-token"]["csi"]["volumeAttributes"] == {"secretProviderClass": "ray-auth-token"}
            assert {"name": "ray-auth-token", "mountPath": "/var/run/secrets/ray-auth", "readOnly": True} in pod[
                "containers"
            ][0]["volumeMounts"]


@pytest.mark.parametrize("env", ENVS)
def test_token_auth_is_on_in_every_environment(env):
    """The cluster stack installs the Secrets Store CSI driver with the switch, so no environment
    needs it off (tests/constructs/test_workloads_security.py)."""
    cfg = load_environment(env)
    assert cfg.eks.ray_token_auth is True
    assert rendered(env) == rendered(env, token_auth=True)


@pytest.mark.parametrize("env", ENVS)
def test_without_token_auth_no_pod_needs_the_csi_driver(env):
    """Switched off, no pod mounts a CSI volume: a pod mounting a volume of a driver the cluster
    lacks never starts, and the switch also removes the driver."""
    for m in rendered(env, token_auth=False):
        assert "authOptions" not in cluster_spec(m)
        for pod in pod_specs(m):
            assert not any("csi" in v for v in pod["volumes"])
            assert all(m_["name"] != "ray-auth-token" for c in pod["containers"] for m_ in c["volumeMounts"])


@pytest.mark.parametrize("env", ENVS)
def test_pods_run_non_root_read_only_without_escalation(env):
    for m in rendered(env):
        for pod in pod_specs(m):
            assert pod["securityContext"]["runAsNonRoot"] is True
            assert pod["securityContext"]["runAsUser"] == 1000
            assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
            vols = {v["name"] for v in pod["volumes"]}
            for c in pod["containers"]:
                sc = c["securityContext"]
                assert sc["allowPrivilegeEscalation"] is False
                assert sc["readOnlyRootFilesystem"] is True
                assert sc["capabilities"] == {"drop": ["ALL"]}
                mounts = {mt["mountPath"]: mt["name"] for mt in c["volumeMounts"]}
                assert mounts["/tmp"] in vols and mounts["/home/ray/.cache"] in vols


def _every_workload(env: str) -> list[dict]:
    """Every RayJob and RayService rendered for ``env``: the training RayJob, the RayServices
    and an ``hpray submit job`` RayJob."""
    from ops.submit import job as job_submit

    cfg = load_environment(env)
    p = job_submit.placement(cfg, instance_group=None, gpus=None, nodes=1)
    job = job_submit.render_job(cfg, name="probe", command=["python", "t.py"], working_dir_uri="s3://b/k.zip", p=p)
    return [*rendered(env), job]


def _as_kuberay_builds(m: dict) -> list[dict]:
    """The pod specs KubeRay 1.7 creates from ``m``'s templates, with the one container it adds
    here: with ``enableInTreeAutoscaling`` the ``autoscaler`` sidecar of the head, built by
    BuildAutoscalerContainer (no volume mounts of its own) and given ``autoscalerOptions.volumeMounts``
    (ray-operator/controllers/ray/common/pod.go:252-276 and mergeAutoscalerOverrides, pod.go:1021-1023,
    at v1.7.0)."""
    spec = cluster_spec(m)
    pods = [copy.deepcopy(p) for p in pod_specs(m)]
    if spec.get("enableInTreeAutoscaling"):
        mounts = (spec.get("autoscalerOptions") or {}).get("volumeMounts", [])
        pods[0]["containers"].append({"name": "autoscaler", "volumeMounts": copy.deepcopy(mounts)})
    return pods


def _token_volumes(pod: dict) -> set[str]:
    return {
        v["name"]
        for v in pod["volumes"]
        if any("serviceAccountToken" in src for src in (v.get("projected") or {}).get("sources", []))
    }


@pytest.mark.parametrize("env", ENVS)
def test_only_the_autoscaler_container_holds_a_kubernetes_api_token(env):
    """The Role KubeRay binds to the head's service account patches every pod and RayCluster of
    the namespace: the Ray containers (Serve controller, submitted jobs) must not hold its token.
    No pod mounts the default token; the autoscaling heads carry a projected token volume that
    only the autoscaler sidecar mounts, at the path Ray's autoscaler reads."""
    from ray.autoscaler._private.kuberay import node_provider

    assert f"{security.API_TOKEN_MOUNT}/token" == node_provider.IN_CLUSTER_TOKEN_PATH
    assert f"{security.API_TOKEN_MOUNT}/ca.crt" == node_provider.IN_CLUSTER_CA_CERT_PATH
    assert security.api_token_mount() == {
        "name": security.API_TOKEN_VOLUME,
        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
        "readOnly": True,
    }
    manifests = _every_workload(env)
    assert {m["kind"] for m in manifests} == {"RayJob", "RayService"}
    autoscalers = 0
    for m in manifests:
        assert crd.validate(m) == [], m["metadata"]["name"]
        for pod in _as_kuberay_builds(m):
            assert pod["automountServiceAccountToken"] is False
            volumes = {v["name"] for v in pod["volumes"]}
            for c in pod["containers"]:
                mounts = c.get("volumeMounts", [])
                assert {mt["name"] for mt in mounts} <= volumes, (m["metadata"]["name"], c["name"])
                at_api_path = [mt for mt in mounts if mt["mountPath"].startswith("/var/run/secrets/kubernetes.io")]
                tokens = [mt for mt in mounts if mt["name"] in _token_volumes(pod)]
                if c["name"] == "autoscaler":
                    autoscalers += 1
                    assert at_api_path == tokens == [security.api_token_mount()]
                else:
                    assert at_api_path == [] and tokens == [], (m["metadata"]["name"], c["name"])
            if not any(c["name"] == "autoscaler" for c in pod["containers"]):
                assert _token_volumes(pod) == set()
    # Every RayService autoscales (the Serve replicas' workers); none of the RayJobs does.
    assert autoscalers == sum(m["kind"] == "RayService" for m in manifests) > 0


def test_the_autoscaler_token_volume_is_what_the_kubelet_would_mount():
    """Token, CA and namespace, as the default kube-api-access volume, with a rotated token."""
    head = cluster_spec(inference.render(load_environment("prod")))["headGroupSpec"]["template"]["spec"]
    (vol,) = [v for v in head["volumes"] if v["name"] == security.API_TOKEN_VOLUME]
    sources = vol["projected"]["sources"]
    assert sources[0] == {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}
    assert sources[1] == {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}
    assert sources[2]["downwardAPI"]["items"][0]["path"] == "namespace"
    assert head["serviceAccountName"] == k8s.SERVICE_ACCOUNT


def test_secret_provider_class_syncs_the_secrets_manager_secret():
    spc = security.render_secret_provider_class(load_environment("dev"))
    assert spc["metadata"]["namespace"] == k8s.NAMESPACE
    objects = json.loads(spc["spec"]["parameters"]["objects"])
    assert objects == [
        {"objectName": "hpray-dev/ray-auth-token", "objectType": "secretsmanager", "objectAlias": "auth_token"}
    ]
    assert spc["spec"]["parameters"]["usePodIdentity"] == "true"
    assert spc["spec"]["secretObjects"] == [
        {"secretName": "ray-auth-token", "type": "Opaque", "data": [{"objectName": "auth_token", "key": "auth_token"}]}
    ]


def test_secret_provider_class_carries_more_secrets():
    """Another secret for the Ray pods (a Redis password for GCS fault tolerance, say) joins the
    same class: one object each, grouped by the Kubernetes Secret it lands in."""
    spc = security.secret_provider_class(
        [
            security.SyncedSecret("p/ray-auth-token", "ray-auth-token", "auth_token"),
            security.SyncedSecret("p/redis", "ray-redis", "password"),
            security.SyncedSecret("p/redis-user", "ray-redis", "username"),
        ],
        region="us-west-2",
    )
    assert [o["objectName"] for o in json.loads(spc["spec"]["parameters"]["objects"])] == [
        "p/ray-auth-token",
        "p/redis",
        "p/redis-user",
    ]
    assert spc["spec"]["secretObjects"][1] == {
        "secretName": "ray-redis",
        "type": "Opaque",
        "data": [{"objectName": "password", "key": "password"}, {"objectName": "username", "key": "username"}],
    }
    with pytest.raises(ValueError, match=r"^a SecretProviderClass needs at least one secret to sync$"):
        security.secret_provider_class([], region="us-west-2")


def test_without_token_auth_rendering_the_secret_provider_class_is_a_clear_error():
    cfg = load_environment("staging")
    cfg = cfg.model_copy(update={"eks": cfg.eks.model_copy(update={"ray_token_auth": False})})
    with pytest.raises(ConfigError) as err:
        security.render_secret_provider_class(cfg)
    assert err.value.errors == [
        "eks.ray_token_auth: false in staging.yaml, so the Ray pods sync no secret and mount no "
        "SecretProviderClass; set it to true to render one"
    ]


def test_harden_keeps_what_the_renderer_set():
    pod = {
        "containers": [
            {
                "name": "c",
                "securityContext": {"runAsUser": 2000},
                "volumeMounts": [{"name": "ray-tmp", "mountPath": "/tmp"}],
            }
        ],
        "volumes": [{"name": "ray-tmp", "emptyDir": {"medium": "Memory"}}],
    }
    out = security.harden_pod(pod)
    assert out["containers"][0]["securityContext"]["runAsUser"] == 2000
    assert [v for v in out["volumes"] if v["name"] == "ray-tmp"] == [
        {"name": "ray-tmp", "emptyDir": {"medium": "Memory"}}
    ]
    assert pod["containers"][0]["securityContext"] == {"runAsUser": 2000}  # input untouched


def test_rendered_yaml_names_no_token():
    for kind in ("training", "inference"):
        out = subprocess.run(
            [sys.executable, "-m", "manifests", "render", kind, "--env", "prod"],
            capture_output=True,
            text=True,
            check=True,
        )
        doc = yaml.safe_load(out.stdout)
        assert "RAY_AUTH_TOKEN" not in out.stdout
        assert cluster_spec(doc)["authOptions"] == {"mode": "token", "secretName": "ray-auth-token"}


@pytest.mark.slow
@pytest.mark.ray_cluster
def test_a_token_authenticated_ray_cluster_denies_callers_without_the_token():
    """A real local Ray cluster started as the pods are (RAY_AUTH_MODE=token, token in the env):
    every HTTP endpoint but the Prometheus exporters answers 401 without the token, 403 with a wrong
    one and serves with it; the Jobs API lists and submits only with it; the GCS refuses a gRPC client
    without it; no file Ray writes holds the token (rigs/auth_check.py)."""
    out = subprocess.run([sys.executable, "-m", "rigs.auth_check"], capture_output=True, text=True, timeout=600)
    summary = json.loads(out.stdout)
    assert summary["failures"] == [], summary
    assert out.returncode == 0
    assert {"dashboard.py", "ray::DashboardAgent", "ray::RuntimeEnvAgent"} <= set(summary["http_denied"])
    assert set(summary["metrics_only"]) <= {"dashboard.py", "monitor.py", "ray::DashboardAgent"}
    assert summary["job_submitted_with_token"] is True
    assert summary["gcs_without_token"] == "Unauthenticated"
    assert summary["client_without_token"] == "Unauthenticated"
    assert summary["files_scanned_for_token"] > 20
