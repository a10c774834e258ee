"""Kubernetes-side security of every Ray cluster the platform renders.

``harden(cluster_spec, ...)`` is applied by every RayJob/RayService renderer to its RayCluster
spec:

- With ``eks.ray_token_auth`` (on by default; it also installs the Secrets Store CSI driver
  add-on, without which a pod mounting its volume never starts): Ray token
  authentication (Ray >= 2.52, KubeRay 1.7 ``authOptions``). KubeRay injects
  ``RAY_AUTH_MODE=token`` and ``RAY_AUTH_TOKEN`` (a ``secretKeyRef`` to key ``auth_token`` of
  ``secretName``) into the head, the workers, the ``wait-gcs-ready`` init container, the
  autoscaler and a K8sJobMode submitter, and reads the same Secret itself to call the
  dashboard (ray-operator/controllers/ray/common/pod.go, utils/util.go at v1.7.0): that is how
  the HTTPMode RayJob (manifests/training.py, no submitter pod) submits its job. With
  ``secretName`` set the operator creates no Secret of its own.
- The token's source is AWS Secrets Manager: the Kubernetes Secret ``AUTH_SECRET`` is synced
  by the Secrets Store CSI driver with the AWS provider (ASCP) from the SecretProviderClass
  ``secret_provider_class``. The CSI driver keeps a synced Secret only while a pod mounts the
  volume, so every Ray pod mounts it (read-only, nothing reads the files). The token is in no
  manifest: only names are.
- Kubernetes API tokens: no Ray container holds one. Every Ray pod has
  ``automountServiceAccountToken: false``; the head of an autoscaling cluster gets a projected
  service-account token (``API_TOKEN_VOLUME``) that only KubeRay's ``autoscaler`` sidecar mounts,
  through ``autoscalerOptions.volumeMounts`` (KubeRay v1.7.0 ray-operator/controllers/ray/common/
  pod.go:275 merges the options into the sidecar it builds, pod.go:1021-1023 appends the mounts).
  The Role KubeRay binds to that service account may patch every pod and RayCluster of the
  namespace; the ``ray-head`` container runs the Serve controller and every submitted job.
- Pod security: non-root (the image's ``ray`` user), no privilege escalation, no capabilities,
  RuntimeDefault seccomp, read-only root filesystem with emptyDirs where Ray writes (``/tmp``:
  Ray's session dir, logs, spilled objects and runtime_env downloads; ``~/.cache``: torch,
  Hugging Face and vLLM caches; ``~/.triton``: Triton's kernel cache).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from config.facts.names import ray_auth_secret_name
from manifests import k8s

if TYPE_CHECKING:
    from config.environment import EnvironmentConfig

# Kubernetes Secret KubeRay reads the token from, and its key (KubeRay's RAY_AUTH_TOKEN_SECRET_KEY).
AUTH_SECRET = "ray-auth-token"
AUTH_SECRET_KEY = "auth_token"
SECRET_PROVIDER_CLASS = "ray-auth-token"
_AUTH_VOLUME = "ray-auth-token"
_AUTH_MOUNT = "/var/run/secrets/ray-auth"
# Where a pod's containers find the Kubernetes API credentials; Ray's autoscaler reads the token
# and the CA there (ray/autoscaler/_private/kuberay/node_provider.py IN_CLUSTER_TOKEN_PATH,
# IN_CLUSTER_CA_CERT_PATH) and rereads the token every minute (TOKEN_REFRESH_PERIOD), so the
# kubelet's rotation of a projected token reaches it.
API_TOKEN_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
API_TOKEN_VOLUME = "kube-api-access-autoscaler"
# What the kubelet gives the default kube-api-access volume (it rotates the token at 80% of it).
API_TOKEN_EXPIRATION_S = 3607
# The rayproject/ray images run as ray (uid 1000) in group users (gid 100); workloads/Dockerfile keeps it.
RAY_UID = 1000
RAY_GID = 100
RAY_HOME = "/home/ray"
# Where Ray (and the libraries under it) write at run time.
WRITABLE_DIRS = {"tmp": "/tmp", "cache": f"{RAY_HOME}/.cache", "triton": f"{RAY_HOME}/.triton"}


# Every pod of one RayJob/RayService carries it: the NetworkPolicies (network_policy.py) select
# the pods of one workload by it (KubeRay's ray.io/cluster is chosen at run time for RayJobs).
WORKLOAD_LABEL = "hyperpod-ray/workload"


def workload_labels(workload: str) -> dict[str, str]:
    return {WORKLOAD_LABEL: workload}


# checkov's Kubernetes checks that do not fit a Ray pod, each with its reason; they travel as
# checkov.io/skip annotations on the pod templates, where a reviewer reads them.
CHECKOV_SKIPS = {
    "CKV_K8S_8": "KubeRay 1.7 injects the Ray liveness probe into head and worker containers (common/pod.go initLivenessAndReadinessProbe).",
    "CKV_K8S_9": "KubeRay 1.7 injects the Ray readiness probe into head and worker containers (common/pod.go initLivenessAndReadinessProbe).",
    "CKV_K8S_15": "IfNotPresent on purpose: the images are multi-GB pinned Ray release tags (manifests/k8s.py) and every node pull costs minutes of GPU time.",
    "CKV_K8S_43": "Images are pinned by Ray release tag in manifests/k8s.py (one place for pins); config.image may give a digest.",
    "CKV_K8S_40": "The Ray images run as their own user ray (uid 1000) that owns /home/ray and the Python install there; another uid cannot use them.",
}


def checkov_annotations() -> dict[str, str]:
    return {
        f"checkov.io/skip{i}": f"{check}={reason}" for i, (check, reason) in enumerate(sorted(CHECKOV_SKIPS.items()), 1)
    }


def secrets_manager_secret_name(name_prefix: str) -> str:
    """Name of the Secrets Manager secret holding the token (constructs/ray_auth.py creates it)."""
    return ray_auth_secret_name(name_prefix)


def auth_options() -> dict[str, Any]:
    return {"mode": "token", "secretName": AUTH_SECRET}


def pod_security_context() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": RAY_UID,
        "runAsGroup": RAY_GID,
        "fsGroup": RAY_GID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": RAY_UID,
        "capabilities": {"drop": ["ALL"]},
    }


def _volumes() -> list[dict[str, Any]]:
    return [
        {
            "name": _AUTH_VOLUME,
            "csi": {
                "driver": "secrets-store.csi.k8s.io",
                "readOnly": True,
                "volumeAttributes": {"secretProviderClass": SECRET_PROVIDER_CLASS},
            },
        },
        *({"name": f"ray-{name}", "emptyDir": {}} for name in WRITABLE_DIRS),
    ]


def _mounts() -> list[dict[str, Any]]:
    return [
        {"name": _AUTH_VOLUME, "mountPath": _AUTH_MOUNT, "readOnly": True},
        *({"name": f"ray-{name}", "mountPath": path} for name, path in WRITABLE_DIRS.items()),
    ]


def api_token_volume() -> dict[str, Any]:
    """The projected volume the default ``kube-api-access-*`` volume would be (token, the
    cluster's CA from ``kube-root-ca.crt``, the namespace), for the autoscaler sidecar alone."""
    return {
        "name": API_TOKEN_VOLUME,
        "projected": {
            "defaultMode": 0o644,
            "sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": API_TOKEN_EXPIRATION_S}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {
                    "downwardAPI": {
                        "items": [
                            {"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}
                        ]
                    }
                },
            ],
        },
    }


def api_token_mount() -> dict[str, Any]:
    return {"name": API_TOKEN_VOLUME, "mountPath": API_TOKEN_MOUNT, "readOnly": True}


def harden_pod(pod_spec: dict[str, Any], *, mount_auth: bool = True) -> dict[str, Any]:
    """``pod_spec`` with the security context, the writable dirs and (``mount_auth``) the CSI
    volume that keeps the token's Secret synced. No container gets the service account's token
    (EKS Pod Identity mounts its own, for AWS only)."""
    spec = copy.deepcopy(pod_spec)
    spec["securityContext"] = {**pod_security_context(), **spec.get("securityContext", {})}
    spec["automountServiceAccountToken"] = False
    volumes = _volumes() if mount_auth else _volumes()[1:]
    mounts = _mounts() if mount_auth else _mounts()[1:]
    have = {v["name"] for v in spec.get("volumes", [])}
    spec["volumes"] = list(spec.get("volumes", [])) + [v for v in volumes if v["name"] not in have]
    for c in spec.get("containers", []):
        c["securityContext"] = {**container_security_context(), **c.get("securityContext", {})}
        mounted = {m["name"] for m in c.get("volumeMounts", [])}
        c["volumeMounts"] = list(c.get("volumeMounts", [])) + [m for m in mounts if m["name"] not in mounted]
    return spec


def harden(cluster_spec: dict[str, Any], *, workload: str, token_auth: bool) -> dict[str, Any]:
    """A RayCluster spec (RayJob ``rayClusterSpec``, RayService ``rayClusterConfig``) with pod
    security and the ``workload`` label on the head and every worker group, and with
    ``token_auth`` (config ``eks.ray_token_auth``) token authentication and the CSI volume that
    syncs the token's Secret."""
    spec = copy.deepcopy(cluster_spec)
    if token_auth:
        spec["authOptions"] = auth_options()
    for template in [spec["headGroupSpec"]["template"]] + [g["template"] for g in spec.get("workerGroupSpecs", [])]:
        meta = template.setdefault("metadata", {})
        meta.setdefault("labels", {}).update(workload_labels(workload))
        meta.setdefault("annotations", {}).update(checkov_annotations())
    head = spec["headGroupSpec"]["template"]
    autoscaling = bool(spec.get("enableInTreeAutoscaling"))
    head["spec"] = harden_pod(head["spec"], mount_auth=token_auth)
    if autoscaling:
        # KubeRay's autoscaler sidecar scales the RayCluster through the Kubernetes API: the
        # head pod carries its token volume, and only the sidecar mounts it.
        head["spec"]["volumes"].append(api_token_volume())
        options = spec.setdefault("autoscalerOptions", {})
        options["volumeMounts"] = [*options.get("volumeMounts", []), api_token_mount()]
    for group in spec.get("workerGroupSpecs", []):
        group["template"]["spec"] = harden_pod(group["template"]["spec"], mount_auth=token_auth)
    return spec


def pods_for_review(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Every pod a RayJob/RayService makes, as v1 Pods (what KubeRay creates from the templates,
    before its own injections), so that Kubernetes policy tools that do not read CRDs check them."""
    spec = manifest["spec"].get("rayClusterSpec") or manifest["spec"]["rayClusterConfig"]
    name = manifest["metadata"]["name"]
    templates = [("head", spec["headGroupSpec"]["template"])]
    templates += [(g["groupName"], g["template"]) for g in spec.get("workerGroupSpecs", [])]
    if "submitterPodTemplate" in manifest["spec"]:
        templates.append(("submitter", manifest["spec"]["submitterPodTemplate"]))
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {**copy.deepcopy(t.get("metadata", {})), "name": f"{name}-{group}", "namespace": k8s.NAMESPACE},
            "spec": copy.deepcopy(t["spec"]),
        }
        for group, t in templates
    ]


@dataclass(frozen=True)
class SyncedSecret:
    """A Secrets Manager secret the SecretProviderClass syncs into key ``key`` of the Kubernetes
    Secret ``secret_name`` of the Ray namespace (the key doubles as the object's file name)."""

    secrets_manager_name: str
    secret_name: str
    key: str


def synced_secrets(cfg: EnvironmentConfig) -> list[SyncedSecret]:
    """Every secret the Ray pods' CSI volume syncs for ``cfg``: the Ray token (with
    ``eks.ray_token_auth``). Another secret for the Ray pods joins this list, and the Pod
    Identity role of the workloads needs read access to it (constructs/ray_auth.py)."""
    out = []
    if cfg.eks.ray_token_auth:
        out.append(SyncedSecret(secrets_manager_secret_name(cfg.name_prefix), AUTH_SECRET, AUTH_SECRET_KEY))
    return out


def render_secret_provider_class(cfg: EnvironmentConfig) -> dict[str, Any]:
    """``python -m manifests render secret-provider-class --env NAME``."""
    secrets = synced_secrets(cfg)
    if not secrets:
        from config import ConfigError

        raise ConfigError(
            f"{cfg.name}.yaml",
            [
                f"eks.ray_token_auth: false in {cfg.name}.yaml, so the Ray pods sync no secret and mount no "
                "SecretProviderClass; set it to true to render one"
            ],
        )
    return secret_provider_class(secrets, region=cfg.region)


def secret_provider_class(
    secrets: Sequence[SyncedSecret],
    *,
    region: str,
    namespace: str = k8s.NAMESPACE,
    name: str = SECRET_PROVIDER_CLASS,
    component: str = "auth",
) -> dict[str, Any]:
    """A SecretProviderClass (by default ``SECRET_PROVIDER_CLASS``, which every Ray pod mounts):
    each of ``secrets`` fetched from Secrets Manager and synced into its Kubernetes Secret.

    ASCP authenticates with the mounting pod's EKS Pod Identity (the workloads' service account),
    whose role needs secretsmanager:GetSecretValue/DescribeSecret on each secret and kms:Decrypt
    on its key."""
    if not secrets:
        raise ValueError("a SecretProviderClass needs at least one secret to sync")
    objects = [
        {"objectName": s.secrets_manager_name, "objectType": "secretsmanager", "objectAlias": s.key} for s in secrets
    ]
    by_secret: dict[str, list[dict[str, str]]] = {}
    for s in secrets:
        by_secret.setdefault(s.secret_name, []).append({"objectName": s.key, "key": s.key})
    return {
        "apiVersion": "secrets-store.csi.x-k8s.io/v1",
        "kind": "SecretProviderClass",
        "metadata": {"name": name, "namespace": namespace, "labels": k8s.labels("ray", component)},
        "spec": {
            "provider": "aws",
            "parameters": {"objects": json.dumps(objects), "region": region, "usePodIdentity": "true"},
            "secretObjects": [{"secretName": name, "type": "Opaque", "data": data} for name, data in by_secret.items()],
        },
    }
