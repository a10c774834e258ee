"""The thin Kubernetes layer: EKS token, JSON-shaped results, API errors as messages. No API
server: the generated client methods are replaced on the instance, nothing is sent."""

from __future__ import annotations

import base64
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import MaxRetryError

from ops.clients.aws import Aws
from ops.clients.kube import TOKEN_PREFIX, Kube, eks_token
from ops.clients.kubeconfig import check
from ops.errors import KubernetesError, NotFoundError, UsageError
from tests.ops.fakes import REGION


def test_eks_token_is_a_presigned_get_caller_identity_for_the_cluster():
    token = eks_token(Aws(REGION), "hpray-dev-eks")
    assert token.startswith(TOKEN_PREFIX)
    encoded = token[len(TOKEN_PREFIX) :]
    url = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    parsed = urlparse(url)
    query = parse_qs(parsed.query)
    assert parsed.hostname == "sts.us-east-1.amazonaws.com"
    assert query["Action"] == ["GetCallerIdentity"]
    assert query["X-Amz-Expires"] == ["60"]
    assert "x-k8s-aws-id" in query["X-Amz-SignedHeaders"][0].split(";")
    assert "=" not in encoded


def offline_kube():
    configuration = client.Configuration()
    configuration.host = "https://kubernetes.invalid"
    return Kube(client.ApiClient(configuration))


def test_results_are_json_shaped_like_the_api_server_sends():
    kube = offline_kube()
    node = client.V1Node(
        metadata=client.V1ObjectMeta(
            name="hyperpod-i-0a1b2c3d4e5f60001", labels={"sagemaker.amazonaws.com/node-health-status": "Schedulable"}
        ),
        spec=client.V1NodeSpec(provider_id="aws:///us-east-1d/i-0a1b2c3d4e5f60001", unschedulable=True),
        status=client.V1NodeStatus(
            conditions=[client.V1NodeCondition(type="Ready", status="True", reason="KubeletReady")]
        ),
    )
    kube.core.list_node = lambda **kw: client.V1NodeList(items=[node])
    [got] = kube.list_nodes()
    assert got["spec"] == {"providerID": "aws:///us-east-1d/i-0a1b2c3d4e5f60001", "unschedulable": True}
    assert got["metadata"]["labels"] == {"sagemaker.amazonaws.com/node-health-status": "Schedulable"}
    assert got["status"]["conditions"] == [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]


def test_calls_carry_a_timeout_and_the_right_group_version():
    kube = offline_kube()
    seen = {}

    def list_custom(group, version, plural, **kw):
        seen.update(group=group, version=version, plural=plural, **kw)
        return {"items": [{"kind": "RayJob"}]}

    kube.custom.list_cluster_custom_object = list_custom
    assert kube.list_ray("RayJob") == [{"kind": "RayJob"}]
    assert seen == {"group": "ray.io", "version": "v1", "plural": "rayjobs", "_request_timeout": (10, 60)}


@pytest.mark.parametrize(
    ("error", "kind", "text"),
    [
        (ApiException(status=404, reason="Not Found"), NotFoundError, "get RayJob ns/j: not found"),
        (
            ApiException(status=403, reason="Forbidden"),
            KubernetesError,
            "Kubernetes API refused get RayJob ns/j: 403 forbidden (RBAC / EKS access entry)",
        ),
        (
            ApiException(status=401, reason="Unauthorized"),
            KubernetesError,
            "Kubernetes API refused get RayJob ns/j: 401 not authenticated",
        ),
        (
            MaxRetryError(None, "/apis/ray.io/v1", "timed out"),
            KubernetesError,
            "cannot reach the Kubernetes API for get RayJob ns/j",
        ),
    ],
)
def test_api_errors_become_messages(error, kind, text):
    kube = offline_kube()

    def fail(*args, **kwargs):
        raise error

    kube.custom.get_namespaced_custom_object = fail
    with pytest.raises(kind) as info:
        kube.get_ray("RayJob", "ns", "j")
    assert info.value.message.startswith(text)
    if isinstance(error, ApiException) and error.status in (401, 403):
        assert "EKS access entry" in info.value.fix


def test_connect_to_a_missing_eks_cluster_says_so(moto):
    with pytest.raises(KubernetesError, match="EKS cluster 'hpray-dev-eks' does not exist in us-east-1"):
        Kube.connect(Aws(REGION), "hpray-dev-eks")


def test_connect_builds_a_client_for_the_eks_endpoint(moto):
    import boto3

    boto3.client("eks", region_name=REGION).create_cluster(
        name="hpray-dev-eks",
        roleArn="arn:aws:iam::111111111111:role/eks",
        resourcesVpcConfig={"subnetIds": ["subnet-1"]},
    )
    kube = Kube.connect(Aws(REGION), "hpray-dev-eks")
    conf = kube.core.api_client.configuration
    assert conf.host.startswith("https://") and conf.host.endswith(".eks.amazonaws.com/")
    assert conf.api_key["authorization"].startswith(TOKEN_PREFIX)
    assert conf.api_key_prefix["authorization"] == "Bearer"
    assert Path(conf.ssl_ca_cert).read_bytes()  # the cluster CA, decoded to a file


def test_connect_with_a_kubeconfig(tmp_path):
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        """
apiVersion: v1
kind: Config
clusters:
- name: dev
  cluster: {server: "https://ABCDEF.gr7.us-east-1.eks.amazonaws.com", insecure-skip-tls-verify: true}
users:
- name: ci
  user: {token: "k8s-aws-v1.dGVzdA"}
contexts:
- name: dev
  context: {cluster: dev, user: ci}
current-context: dev
"""
    )
    target = check(str(kubeconfig), "dev", cluster="hpray-dev-eks", region=REGION)
    kube = Kube.connect(None, "ignored", kubeconfig=target)
    assert kube.core.api_client.configuration.host == "https://ABCDEF.gr7.us-east-1.eks.amazonaws.com"
    assert "the server https://ABCDEF.gr7.us-east-1.eks.amazonaws.com of context 'dev'" in kube.unreachable_fix
    with pytest.raises(UsageError, match=f"--context 'prod' is not in kubeconfig {kubeconfig}"):
        check(str(kubeconfig), "prod", cluster="hpray-dev-eks", region=REGION)


class Recorder:
    """Replaces ApiClient.call_api: records what the generated client would send."""

    def __init__(self):
        self.calls = []

    def __call__(
        self, path, method, path_params=None, query_params=None, header_params=None, body=None, response_type=None, **kw
    ):
        url = path.format(**(path_params or {}))
        self.calls.append((method, url, dict(query_params or []), body, kw.get("_request_timeout")))
        if response_type == "V1PodList":
            return client.V1PodList(items=[])
        if response_type == "str":
            return "2026-12-02T12:00:00Z TRAIN step=1 loss=1.0\n"
        return {"metadata": {"resourceVersion": "7"}}


def test_each_call_reaches_the_right_endpoint():
    kube = offline_kube()
    rec = Recorder()
    kube._api.call_api = rec
    body = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "j"}}
    kube.get_ray("RayJob", "ns", "j")
    kube.create_ray("RayJob", "ns", body)
    kube.replace_ray("RayService", "ns", "s", body)
    kube.delete_ray("RayJob", "ns", "j")
    kube.list_pods("ns", "batch.kubernetes.io/job-name=j")
    got = [(m, u, q) for m, u, q, _, _ in rec.calls]
    assert got == [
        ("GET", "/apis/ray.io/v1/namespaces/ns/rayjobs/j", {}),
        ("POST", "/apis/ray.io/v1/namespaces/ns/rayjobs", {}),
        ("PUT", "/apis/ray.io/v1/namespaces/ns/rayservices/s", {}),
        ("DELETE", "/apis/ray.io/v1/namespaces/ns/rayjobs/j", {}),
        ("GET", "/api/v1/namespaces/ns/pods", {"labelSelector": "batch.kubernetes.io/job-name=j"}),
    ]
    assert rec.calls[1][3] == body
    assert rec.calls[3][3].propagation_policy == "Foreground"
    assert {t for *_, t in rec.calls} == {(10, 60)}


def test_kubeconfig_from_the_kubeconfig_variable_merges_its_files_first_wins(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    first.write_text("current-context: lab\ncontexts:\n- {name: lab, context: {cluster: lab, user: u}}\n")
    second.write_text(
        "contexts:\n- {name: lab, context: {cluster: other, user: u}}\n"
        "clusters:\n- {name: lab, cluster: {server: 'https://10.0.0.1'}}\n- {name: other, cluster: {server: 'https://x'}}\n"
    )
    environ = {"KUBECONFIG": f"{first}:{tmp_path / 'missing'}:{second}"}
    target = check(None, None, cluster="hpray-dev-eks", region=REGION, environ=environ)
    assert (target.files, target.source, target.context, target.server) == (
        (first, second),
        "$KUBECONFIG",
        "lab",
        "https://10.0.0.1",
    )
    assert target.config_file == f"{first}:{second}"
