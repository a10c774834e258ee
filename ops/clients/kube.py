"""A thin Kubernetes client: connect to the environment's EKS cluster, make a few calls, return
plain JSON-shaped dicts (as ``kubectl get -o json`` shows them).

No logic lives here beyond the calls themselves; ops/reports/status.py and ops/submit/progress.py turn the dicts
into tables and progress lines and are tested on realistic objects.
"""

from __future__ import annotations

import atexit
import base64
import os
import tempfile
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ops.clients.aws import Aws
from ops.errors import ClusterAccessError, KubernetesError, NotFoundError, QuotaExceededError

if TYPE_CHECKING:
    from ops.clients.kubeconfig import KubeconfigTarget

# The KubeRay CRDs' API group and version (a Kubernetes API version; the Ray release is
# manifests.k8s.RAY_VERSION).
RAY_GROUP, RAY_CRD_VERSION = "ray.io", "v1"
PLURALS = {"RayJob": "rayjobs", "RayService": "rayservices", "RayCluster": "rayclusters"}
# The KubeRay Helm chart labels its operator Deployment with this (chart templates/deployment.yaml).
KUBERAY_OPERATOR_SELECTOR = "app.kubernetes.io/name=kuberay-operator"
# EKS bearer tokens are presigned STS GetCallerIdentity URLs, valid 15 minutes; renew after 10.
TOKEN_PREFIX = "k8s-aws-v1."
TOKEN_REFRESH_S = 600
# Client-side timeout for each API call (connect, read), seconds.
REQUEST_TIMEOUT = (10, 60)
# What to do when the environment's EKS endpoint does not answer (a kubeconfig's has its own:
# ops/clients/kubeconfig.py).
EKS_UNREACHABLE_FIX = "a private EKS endpoint is reachable only from inside the VPC (VPN, bastion, CI runner)"


def eks_token(aws: Aws, cluster_name: str) -> str:
    """A bearer token for EKS, as ``aws eks get-token`` makes it: a presigned STS
    GetCallerIdentity URL carrying the ``x-k8s-aws-id: <cluster>`` header, base64url-encoded."""
    sts = aws.session.client("sts", region_name=aws.region)

    def add_cluster_header(request: Any, **_: Any) -> None:
        request.headers["x-k8s-aws-id"] = cluster_name

    sts.meta.events.register("before-sign.sts.GetCallerIdentity", add_cluster_header)
    try:
        url = sts.generate_presigned_url("get_caller_identity", Params={}, ExpiresIn=60, HttpMethod="GET")
    except Exception as err:  # botocore credential errors
        from ops.clients.aws import translate

        raise translate(err, action="sts:GetCallerIdentity (EKS token)", region=aws.region) from None
    return TOKEN_PREFIX + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


def _api_client_for_eks(aws: Aws, cluster_name: str) -> Any:
    from kubernetes import client

    try:
        cluster = aws.call("eks", "describe_cluster", name=cluster_name)["cluster"]
    except NotFoundError:
        raise KubernetesError(
            f"EKS cluster {cluster_name!r} does not exist in {aws.region}",
            "deploy the environment first (cdk deploy), or pass --kubeconfig/--context",
        ) from None
    endpoint = cluster.get("endpoint")
    ca = (cluster.get("certificateAuthority") or {}).get("data")
    if not endpoint or not ca:
        raise KubernetesError(f"EKS cluster {cluster_name!r} is {cluster.get('status')}: no API endpoint yet")
    with tempfile.NamedTemporaryFile(prefix="eks-ca-", suffix=".pem", delete=False) as ca_file:
        ca_file.write(base64.b64decode(ca))
    atexit.register(os.unlink, ca_file.name)
    configuration = client.Configuration()
    configuration.host = endpoint
    configuration.ssl_ca_cert = ca_file.name
    issued = {"at": 0.0}

    def refresh(conf: Any) -> None:
        if time.monotonic() - issued["at"] > TOKEN_REFRESH_S:
            conf.api_key["authorization"] = eks_token(aws, cluster_name)
            conf.api_key_prefix["authorization"] = "Bearer"
            issued["at"] = time.monotonic()

    configuration.refresh_api_key_hook = refresh
    refresh(configuration)
    return client.ApiClient(configuration)


def _status_message(err: Any) -> str:
    """The ``message`` of the API's Status body (where quota and admission refusals say why)."""
    import json

    try:
        return str(json.loads(err.body or "{}").get("message") or "")
    except (TypeError, ValueError):
        return str(err.body or "")


def _reason(err: Exception) -> str:
    """The socket's own words ("[Errno 111] Connection refused") rather than urllib3's retry story."""
    import re

    text = str(err)
    found = re.search(r"(\[Errno -?\d+\][^'\")]*)", text)
    host = getattr(getattr(err, "pool", None), "host", None)
    return (f"{host}: " if host else "") + (found.group(1).strip() if found else text)


def _namespace_of(what: str) -> str:
    # ``what`` reads "create RayJob in NAMESPACE" or "get RayJob NAMESPACE/NAME".
    tail = what.rsplit(" ", 1)[-1]
    return tail.split("/", 1)[0]


class Kube:
    """The handful of Kubernetes calls the CLI makes. Results are JSON-shaped dicts."""

    def __init__(self, api_client: Any, *, unreachable_fix: str = EKS_UNREACHABLE_FIX):
        from kubernetes import client

        self._api = api_client
        self.unreachable_fix = unreachable_fix
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)

    @classmethod
    def connect(cls, aws: Aws, cluster_name: str, *, kubeconfig: KubeconfigTarget | None = None) -> Kube:
        """From the environment's EKS cluster (default), or from a checked kubeconfig when one is given."""
        if kubeconfig is not None:
            from ops.clients.kubeconfig import api_client

            return cls(api_client(kubeconfig), unreachable_fix=kubeconfig.unreachable_fix())
        return cls(_api_client_for_eks(aws, cluster_name))

    # -- helpers -------------------------------------------------------------------------------

    def _plain(self, obj: Any) -> Any:
        return self._api.sanitize_for_serialization(obj)

    def _do(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            return fn(*args, **{"_request_timeout": REQUEST_TIMEOUT, **kwargs})
        except ApiException as err:
            if err.status == 404:
                raise NotFoundError(f"{what}: not found") from None
            detail = _status_message(err)
            if err.status == 403 and "exceeded quota" in detail:
                namespace = _namespace_of(what)
                raise QuotaExceededError(
                    f"the namespace's ResourceQuota refused {what}: {detail}",
                    f"ask fewer GPUs/CPUs, wait for other jobs to finish (`hpray jobs`), or raise the quota "
                    f"(kubectl -n {namespace} describe resourcequota)",
                ) from None
            reason = {401: "not authenticated", 403: "forbidden (RBAC / EKS access entry)"}.get(err.status, err.reason)
            error = ClusterAccessError if err.status in (401, 403) else KubernetesError
            raise error(
                f"Kubernetes API refused {what}: {err.status} {reason}",
                "check that your IAM principal has an EKS access entry with a policy that allows this"
                if err.status in (401, 403)
                else None,
            ) from None
        except HTTPError as err:
            raise ClusterAccessError(
                f"cannot reach the Kubernetes API for {what}: {_reason(err)}", self.unreachable_fix
            ) from None

    # -- calls ---------------------------------------------------------------------------------

    def list_nodes(self, label_selector: str | None = None) -> list[dict[str, Any]]:
        kwargs = {"label_selector": label_selector} if label_selector else {}
        return self._plain(self._do("list nodes", self.core.list_node, **kwargs)).get("items", [])

    def list_operator_deployments(self) -> list[dict[str, Any]]:
        result = self._do(
            "list KubeRay operator deployments",
            self.apps.list_deployment_for_all_namespaces,
            label_selector=KUBERAY_OPERATOR_SELECTOR,
        )
        return self._plain(result).get("items", [])

    def list_ray(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Every object of ``kind``; with ``namespace``, of that namespace only (a namespaced list,
        which a team's namespaced Role allows)."""
        if namespace:
            result = self._do(
                f"list {PLURALS[kind]} in {namespace}",
                self.custom.list_namespaced_custom_object,
                RAY_GROUP,
                RAY_CRD_VERSION,
                namespace,
                PLURALS[kind],
            )
        else:
            result = self._do(
                f"list {PLURALS[kind]}",
                self.custom.list_cluster_custom_object,
                RAY_GROUP,
                RAY_CRD_VERSION,
                PLURALS[kind],
            )
        return result.get("items", [])

    def get_ray(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        return self._do(
            f"get {kind} {namespace}/{name}",
            self.custom.get_namespaced_custom_object,
            RAY_GROUP,
            RAY_CRD_VERSION,
            namespace,
            PLURALS[kind],
            name,
        )

    def create_ray(self, kind: str, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._do(
            f"create {kind} in {namespace}",
            self.custom.create_namespaced_custom_object,
            RAY_GROUP,
            RAY_CRD_VERSION,
            namespace,
            PLURALS[kind],
            body,
        )

    def replace_ray(self, kind: str, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._do(
            f"replace {kind} {namespace}/{name}",
            self.custom.replace_namespaced_custom_object,
            RAY_GROUP,
            RAY_CRD_VERSION,
            namespace,
            PLURALS[kind],
            name,
            body,
        )

    def delete_ray(self, kind: str, namespace: str, name: str) -> None:
        from kubernetes import client

        self._do(
            f"delete {kind} {namespace}/{name}",
            self.custom.delete_namespaced_custom_object,
            RAY_GROUP,
            RAY_CRD_VERSION,
            namespace,
            PLURALS[kind],
            name,
            body=client.V1DeleteOptions(propagation_policy="Foreground"),
        )

    def list_pods(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        result = self._do(
            f"list pods in {namespace}", self.core.list_namespaced_pod, namespace, label_selector=label_selector
        )
        return self._plain(result).get("items", [])

    # -- calls of the job commands (jobs, logs, stop, dashboard) ---------------------------------

    def patch_ray(self, kind: str, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A JSON merge patch of one Ray object (e.g. ``{"spec": {"suspend": True}}``)."""
        return self._do(
            f"patch {kind} {namespace}/{name}",
            self.custom.patch_namespaced_custom_object,
            RAY_GROUP,
            RAY_CRD_VERSION,
            namespace,
            PLURALS[kind],
            name,
            patch,
        )

    def list_events(self, namespace: str, field_selector: str) -> list[dict[str, Any]]:
        result = self._do(
            f"list events in {namespace}", self.core.list_namespaced_event, namespace, field_selector=field_selector
        )
        return self._plain(result).get("items", [])

    def read_pod_log(
        self,
        namespace: str,
        pod: str,
        *,
        container: str | None = None,
        tail_lines: int | None = None,
        previous: bool = False,
    ) -> str:
        kwargs: dict[str, Any] = {"container": container, "tail_lines": tail_lines, "previous": previous or None}
        return str(
            self._do(
                f"read the log of pod {namespace}/{pod}",
                self.core.read_namespaced_pod_log,
                pod,
                namespace,
                **{k: v for k, v in kwargs.items() if v is not None},
            )
        )

    def stream_pod_log(
        self, namespace: str, pod: str, *, container: str | None = None, tail_lines: int | None = None
    ) -> Iterator[bytes]:
        """The pod's log as the API server streams it (``follow``), until the container ends."""
        kwargs: dict[str, Any] = {"container": container, "tail_lines": tail_lines}
        response = self._do(
            f"follow the log of pod {namespace}/{pod}",
            self.core.read_namespaced_pod_log,
            pod,
            namespace,
            follow=True,
            _preload_content=False,
            _request_timeout=(REQUEST_TIMEOUT[0], None),
            **{k: v for k, v in kwargs.items() if v is not None},
        )
        return iter(response.stream(4096, decode_content=True))

    def get_service(self, namespace: str, name: str) -> dict[str, Any]:
        return self._plain(
            self._do(f"get service {namespace}/{name}", self.core.read_namespaced_service, name, namespace)
        )

    def read_config_map(self, namespace: str, name: str) -> dict[str, str]:
        """The ``data`` of a ConfigMap (NotFoundError when it is not there)."""
        found = self._plain(
            self._do(f"read configmap {namespace}/{name}", self.core.read_namespaced_config_map, name, namespace)
        )
        return dict(found.get("data") or {})

    def read_secret_value(self, namespace: str, name: str, key: str) -> str:
        secret = self._plain(
            self._do(f"read secret {namespace}/{name}", self.core.read_namespaced_secret, name, namespace)
        )
        data = (secret.get("data") or {}).get(key)
        if data is None:
            raise NotFoundError(f"secret {namespace}/{name} has no key {key!r}")
        return base64.b64decode(data).decode()

    def apply_crd(self, body: dict[str, Any], *, field_manager: str, dry_run: bool) -> dict[str, Any]:
        """Server-side apply of one CustomResourceDefinition (``kubectl apply --server-side
        --force-conflicts [--dry-run=server]``). The generated client has no way to send the
        apply content type for a CRD, so the call is made through ApiClient.call_api."""
        name = body["metadata"]["name"]
        query = [("fieldManager", field_manager), ("force", True)] + ([("dryRun", "All")] if dry_run else [])
        return self._do(
            f"apply CRD {name}" + (" (server dry run)" if dry_run else ""),
            self._api.call_api,
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}",
            "PATCH",
            path_params={"name": name},
            query_params=query,
            header_params={"Content-Type": "application/apply-patch+yaml", "Accept": "application/json"},
            body=body,
            response_type="object",
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
        )

    def pod_http_post(
        self, namespace: str, pod: str, port: int, path: str, headers: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        """POST (no body) to ``path`` of the pod's ``port``, as :meth:`pod_http_get` (``ray job stop``'s call)."""
        return self.pod_http_get(namespace, pod, port, path, headers, method="POST")

    def pod_http_get(
        self,
        namespace: str,
        pod: str,
        port: int,
        path: str,
        headers: dict[str, str] | None = None,
        *,
        method: str = "GET",
    ) -> tuple[int, bytes]:
        """GET ``path`` from ``port`` of the pod through the API's pod ``portforward`` (a websocket,
        as ``kubectl port-forward``): the kubelet connects inside the pod's network namespace, so
        the namespace's NetworkPolicies (ingress to the head only from its own workload and the
        operator) do not apply. One port-forward per request. Returns (HTTP status, body)."""
        import http.client

        from kubernetes.stream import portforward

        what = f"port-forward to {namespace}/{pod}:{port}"
        try:
            pf = portforward(self.core.connect_get_namespaced_pod_portforward, pod, namespace, ports=str(port))
        except Exception as err:  # the websocket handshake: ApiException (RBAC, no pod) or a socket error
            status = getattr(err, "status", None)
            if status == 404:
                raise NotFoundError(f"{what}: not found") from None
            raise ClusterAccessError(
                f"{what} failed: {status or err}",
                "your access entry needs create on pods/portforward in this namespace",
            ) from None
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT[1])
        conn.sock = pf.socket(port)
        try:
            conn.request(method, path, headers={**(headers or {}), "Connection": "close"})
            response = conn.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException) as err:
            raise ClusterAccessError(
                f"{what}: {method} {path} failed: {err or type(err).__name__} {pf.error(port) or ''}".strip(),
                "check that the pod is running and listens on the port",
            ) from None
        finally:
            conn.close()
            pf.close()
