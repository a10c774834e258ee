"""A small Kubernetes API server on 127.0.0.1 for the job commands' tests: real HTTP that the real
``kubernetes`` client talks to, with the paths, query parameters and JSON the API server uses
for the calls the CLI makes (RayJobs, pods, events, CRDs, and the pod ``portforward``
websocket, relayed to a real loopback port where the pod's port stands).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import re
import select
import socket
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse


class State:
    def __init__(self) -> None:
        self.rayjobs: dict[tuple[str, str], dict[str, Any]] = {}
        self.rayservices: dict[tuple[str, str], dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        # (namespace, pod, container, previous) -> the container's log
        self.pod_logs: dict[tuple[str, str, str, bool], str] = {}
        self.events: list[dict[str, Any]] = []
        self.quota_message: str | None = None
        self.crds: dict[str, dict[str, Any]] = {}
        self.crd_applies: list[tuple[str, bool, str]] = []  # (name, dry run, field manager)
        self.requests: list[tuple[str, str]] = []
        self.on_create = None  # callable(rayjob) run after a RayJob is created
        # (namespace, pod) -> {pod port: (host, port) on loopback where that port really listens}
        self.pod_ports: dict[tuple[str, str], dict[int, tuple[str, int]]] = {}
        self.port_forwards: list[tuple[str, str, int]] = []
        # (namespace, rules): the caller holds only these Role rules, in that namespace (RBAC as
        # the API server applies it: every other request is Forbidden).
        self.rbac: tuple[str, list[dict[str, Any]]] | None = None
        self.forbidden: list[str] = []
        # (namespace, name) -> data: the cluster stack's ConfigMap of the deployed workloads image.
        self.config_maps: dict[tuple[str, str], dict[str, str]] = {
            ("ray-workloads", "hpray-workloads-image"): {"uri": DEPLOYED_IMAGE}
        }
        self.lock = threading.Lock()

    def add_pod(self, pod: dict[str, Any]) -> None:
        self.pods[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = pod


def _matches(labels: dict[str, str], selector: str) -> bool:
    for term in filter(None, (selector or "").split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


RAYJOBS = re.compile(r"^/apis/ray\.io/v1(?:/namespaces/(?P<ns>[^/]+))?/rayjobs(?:/(?P<name>[^/]+))?$")
# Kept empty here: the job commands also look for RayServices.
RAYSERVICES = re.compile(r"^/apis/ray\.io/v1(?:/namespaces/(?P<ns>[^/]+))?/rayservices(?:/(?P<name>[^/]+))?$")
PODS = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods$")
POD_LOG = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/log$")
PORTFORWARD = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/portforward$")
WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
EVENTS = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/events$")
CRDS = re.compile(r"^/apis/apiextensions\.k8s\.io/v1/customresourcedefinitions/(?P<name>[^/]+)$")


SECRETS = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/secrets(?:/(?P<name>[^/]+))?$")
CONFIGMAPS = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/configmaps/(?P<name>[^/]+)$")
DEPLOYED_IMAGE = (
    "111111111111.dkr.ecr.us-east-1.amazonaws.com/cdk-hnb659fds-container-assets-111111111111-us-east-1:deployed"
)


def _rbac_requests(method: str, path: str, q: dict[str, str]) -> list[tuple[str | None, str, str, str]]:
    """(namespace or None for the cluster scope, API group, resource, verb) the API server
    authorizes for one request."""
    named = {"GET": "get", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}
    if m := PORTFORWARD.match(path):
        # A websocket GET: authorized as get, and from Kubernetes 1.35 also as create.
        return [(m["ns"], "", "pods/portforward", "get"), (m["ns"], "", "pods/portforward", "create")]
    for pattern, group, resource in (
        (RAYJOBS, "ray.io", "rayjobs"),
        (RAYSERVICES, "ray.io", "rayservices"),
        (SECRETS, "", "secrets"),
        (CONFIGMAPS, "", "configmaps"),
    ):
        if m := pattern.match(path):
            if method == "POST":
                verb = "create"
            elif m["name"]:
                verb = named[method]
            else:
                verb = "watch" if q.get("watch") in ("true", "1") else "list"
            return [(m["ns"], group, resource, verb)]
    if m := PODS.match(path):
        return [(m["ns"], "", "pods", "create" if method == "POST" else "list")]
    if m := EVENTS.match(path):
        return [(m["ns"], "", "events", "list")]
    if CRDS.match(path):
        return [(None, "apiextensions.k8s.io", "customresourcedefinitions", "patch")]
    return [(None, "", path, method.lower())]


def _forbidden(state: State, method: str, url: Any) -> str | None:
    """The API server's Forbidden message for the request, where ``state.rbac`` does not allow it."""
    if state.rbac is None:
        return None
    from review.rbac import _matches

    namespace, rules = state.rbac
    q = {k: v[0] for k, v in parse_qs(url.query).items()}
    for ns, group, resource, verb in _rbac_requests(method, url.path, q):
        if ns == namespace and any(_matches(rule, (group, resource, verb)) for rule in rules):
            continue
        where = f'in the namespace "{ns}"' if ns else "at the cluster scope"
        message = (
            f'{resource}{"." + group if group else ""} is forbidden: User "team-member" cannot {verb} '
            f'resource "{resource}" in API group "{group}" {where}'
        )
        state.forbidden.append(message)
        return message
    return None


def make_handler(state: State):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, code: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> Any:
            n = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(n) or b"{}")

        def do_GET(self) -> None:
            url = urlparse(self.path)
            if denied := _forbidden(state, "GET", url):
                return self._send(403, _status(403, "Forbidden", denied))
            q = {k: v[0] for k, v in parse_qs(url.query).items()}
            state.requests.append(("GET", self.path))
            if m := PORTFORWARD.match(url.path):
                return self._portforward(m["ns"], m["name"], q)
            if m := RAYJOBS.match(url.path):
                if m["name"]:
                    obj = state.rayjobs.get((m["ns"], m["name"]))
                    return (
                        self._send(200, obj)
                        if obj
                        else self._send(404, _status(404, "NotFound", f'rayjobs.ray.io "{m["name"]}" not found'))
                    )
                items = [o for (ns, _), o in state.rayjobs.items() if not m["ns"] or ns == m["ns"]]
                return self._send(
                    200, {"apiVersion": "ray.io/v1", "kind": "RayJobList", "metadata": {}, "items": items}
                )
            if m := RAYSERVICES.match(url.path):
                if m["name"]:
                    found = state.rayservices.get((m["ns"], m["name"]))
                    if found:
                        return self._send(200, found)
                    return self._send(404, _status(404, "NotFound", f'rayservices.ray.io "{m["name"]}" not found'))
                return self._send(
                    200, {"apiVersion": "ray.io/v1", "kind": "RayServiceList", "metadata": {}, "items": []}
                )
            if m := CONFIGMAPS.match(url.path):
                data = state.config_maps.get((m["ns"], m["name"]))
                if data is None:
                    return self._send(404, _status(404, "NotFound", f'configmaps "{m["name"]}" not found'))
                meta = {"name": m["name"], "namespace": m["ns"]}
                return self._send(200, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data})
            if m := POD_LOG.match(url.path):
                return self._pod_log(m["ns"], m["name"], q)
            if m := PODS.match(url.path):
                items = [
                    p
                    for (ns, _), p in sorted(state.pods.items())
                    if ns == m["ns"] and _matches(p["metadata"].get("labels") or {}, q.get("labelSelector", ""))
                ]
                return self._send(200, {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items})
            if m := EVENTS.match(url.path):
                wanted = dict(t.split("=", 1) for t in q.get("fieldSelector", "").split(",") if t)
                items = [
                    e
                    for e in state.events
                    if all(
                        (e["involvedObject"].get(k.split(".", 1)[1]) if k.startswith("involvedObject.") else e.get(k))
                        == v
                        for k, v in wanted.items()
                    )
                ]
                return self._send(200, {"apiVersion": "v1", "kind": "EventList", "metadata": {}, "items": items})
            self._send(404, _status(404, "NotFound", "the server could not find the requested resource"))

        def _pod_log(self, ns: str, name: str, q: dict[str, str]) -> None:
            """``GET .../pods/NAME/log`` as the API server answers it: text/plain, the first
            container's unless ``container``, the last ``tailLines``; ``follow`` streams it to the
            container's end (here: all of it, then the end)."""
            pod = state.pods.get((ns, name))
            if pod is None:
                return self._send(404, _status(404, "NotFound", f'pods "{name}" not found'))
            container = q.get("container") or pod["spec"]["containers"][0]["name"]
            # The API server parses booleans as Go's strconv.ParseBool (the client sends "True").
            previous = q.get("previous", "") in ("1", "t", "T", "TRUE", "true", "True")
            text = state.pod_logs.get((ns, name, container, previous))
            if text is None:
                message = f'previous terminated container "{container}" in pod "{name}" not found'
                return self._send(400, _status(400, "BadRequest", message))
            if q.get("tailLines"):
                text = "".join(text.splitlines(keepends=True)[-int(q["tailLines"]) :])
            data = text.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _portforward(self, ns: str, name: str, q: dict[str, str]) -> None:
            """The pod ``portforward`` subresource as the API server serves it to a websocket client
            (``v4.channel.k8s.io``): per port a data channel (2i) and an error channel (2i+1), each
            opened by a frame with the port number (little endian); data frames carry the channel
            byte first. The far end is a real TCP connection to where the pod's port listens."""
            if self.headers.get("Upgrade", "").lower() != "websocket":
                return self._send(400, _status(400, "BadRequest", "Upgrade request required"))
            port = int(q.get("ports", "0"))
            target = state.pod_ports.get((ns, name), {}).get(port)
            if target is None:
                return self._send(404, _status(404, "NotFound", f'pods "{name}" not found'))
            upstream = socket.create_connection(target, timeout=10)
            state.port_forwards.append((ns, name, port))
            accept = base64.b64encode(hashlib.sha1((self.headers["Sec-WebSocket-Key"] + WS_GUID).encode()).digest())
            self.send_response(101, "Switching Protocols")
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            self.send_header("Sec-WebSocket-Accept", accept.decode())
            self.send_header("Sec-WebSocket-Protocol", "v4.channel.k8s.io")
            self.end_headers()
            self.wfile.flush()
            self.close_connection = True
            client = self.connection
            for channel in (0, 1):
                client.sendall(_ws_frame(bytes([channel]) + struct.pack("<H", port)))
            try:
                while True:
                    # The client sends frames only after the 101, so nothing waits in rfile's buffer.
                    readable, _, _ = select.select([client, upstream], [], [], 30)
                    if not readable:
                        continue
                    if upstream in readable:
                        data = upstream.recv(65536)
                        if not data:
                            break
                        client.sendall(_ws_frame(b"\x00" + data))
                    if client in readable:
                        opcode, payload = _ws_read(client)
                        if opcode == 8 or opcode is None:
                            break
                        if opcode == 2 and payload[:1] == b"\x00":
                            upstream.sendall(payload[1:])
            finally:
                upstream.close()
                with contextlib.suppress(OSError):
                    client.sendall(_ws_frame(b"", opcode=8))

        def do_POST(self) -> None:
            url = urlparse(self.path)
            if denied := _forbidden(state, "POST", url):
                return self._send(403, _status(403, "Forbidden", denied))
            state.requests.append(("POST", self.path))
            m = RAYJOBS.match(url.path)
            if not m:
                return self._send(404, _status(404, "NotFound", "no such path"))
            body = self._body()
            if state.quota_message:
                return self._send(403, _status(403, "Forbidden", state.quota_message))
            key = (m["ns"], body["metadata"]["name"])
            if key in state.rayjobs:
                return self._send(409, _status(409, "AlreadyExists", "exists"))
            body["metadata"].setdefault("namespace", m["ns"])
            body["metadata"]["creationTimestamp"] = "2026-12-03T11:00:00Z"
            body["metadata"]["resourceVersion"] = "1"
            state.rayjobs[key] = body
            self._send(201, body)
            if state.on_create:
                state.on_create(body)

        def do_PATCH(self) -> None:
            url = urlparse(self.path)
            if denied := _forbidden(state, "PATCH", url):
                return self._send(403, _status(403, "Forbidden", denied))
            state.requests.append(("PATCH", self.path))
            if m := CRDS.match(url.path):
                return self._apply_crd(m["name"], {k: v[0] for k, v in parse_qs(url.query).items()})
            m = RAYJOBS.match(url.path)
            obj = state.rayjobs.get((m["ns"], m["name"])) if m else None
            if obj is None:
                return self._send(404, _status(404, "NotFound", "not found"))
            # Custom resources take JSON merge patches (not strategic merge patches).
            if self.headers["Content-Type"] != "application/merge-patch+json":
                return self._send(
                    415,
                    _status(
                        415,
                        "UnsupportedMediaType",
                        f"the body of the request was in an unknown format: {self.headers['Content-Type']}",
                    ),
                )
            patch = self._body()
            for k, v in patch.get("spec", {}).items():
                obj["spec"][k] = v
            self._send(200, obj)

        def _apply_crd(self, name: str, q: dict[str, str]) -> None:
            # Server-side apply: the apply content type, a field manager; dryRun=All changes nothing.
            if self.headers["Content-Type"] != "application/apply-patch+yaml":
                return self._send(
                    415, _status(415, "UnsupportedMediaType", f"not an apply patch: {self.headers['Content-Type']}")
                )
            if not q.get("fieldManager"):
                return self._send(422, _status(422, "Invalid", "fieldManager is required for apply requests"))
            body = self._body()
            if body.get("kind") != "CustomResourceDefinition" or body["metadata"]["name"] != name:
                return self._send(422, _status(422, "Invalid", "name or kind does not match"))
            dry = q.get("dryRun") == "All"
            state.crd_applies.append((name, dry, q["fieldManager"]))
            if not dry:
                state.crds[name] = body
            self._send(200, body)

        def do_DELETE(self) -> None:
            url = urlparse(self.path)
            if denied := _forbidden(state, "DELETE", url):
                return self._send(403, _status(403, "Forbidden", denied))
            state.requests.append(("DELETE", self.path))
            m = RAYJOBS.match(url.path)
            obj = state.rayjobs.pop((m["ns"], m["name"]), None) if m else None
            self._send(200, obj) if obj else self._send(404, _status(404, "NotFound", "not found"))

    return Handler


def _ws_frame(payload: bytes, *, opcode: int = 2) -> bytes:
    """One unmasked server frame (RFC 6455 5.2)."""
    n = len(payload)
    head = bytes([0x80 | opcode])
    if n < 126:
        head += bytes([n])
    elif n < 1 << 16:
        head += bytes([126]) + struct.pack("!H", n)
    else:
        head += bytes([127]) + struct.pack("!Q", n)
    return head + payload


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _ws_read(sock: socket.socket) -> tuple[int | None, bytes]:
    """One client frame (always masked); (None, b"") when the client went away."""
    head = _recv_exact(sock, 2)
    if len(head) < 2:
        return None, b""
    opcode, n = head[0] & 0x0F, head[1] & 0x7F
    if n == 126:
        n = struct.unpack("!H", _recv_exact(sock, 2))[0]
    elif n == 127:
        n = struct.unpack("!Q", _recv_exact(sock, 8))[0]
    mask = _recv_exact(sock, 4) if head[1] & 0x80 else b"\x00\x00\x00\x00"
    data = _recv_exact(sock, n)
    return opcode, bytes(b ^ mask[i % 4] for i, b in enumerate(data))


class JobsApiStandIn:
    """The two things of a Ray head's Jobs API that ``hpray logs`` reads, on 127.0.0.1, for tests
    that need no Ray: ``GET /api/jobs/{id}/logs`` (``{"logs": ...}``, 404 for an unknown job) and
    Ray's token check (401 without a token, 403 for a wrong one). The end-to-end test uses a real
    Ray dashboard instead."""

    def __init__(self, token: str | None = None) -> None:
        self.logs: dict[str, str] = {}
        self.token = token
        self.headers: list[dict[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                outer.headers.append({k.lower(): v for k, v in self.headers.items()})
                m = re.match(r"^/api/jobs/([^/]+)/logs$", self.path)
                given = self.headers.get("x-ray-authorization") or self.headers.get("Authorization")
                if outer.token and not given:
                    code, body = 401, b"Unauthorized: Missing authentication token"
                elif outer.token and given != f"Bearer {outer.token}":
                    code, body = 403, b"Forbidden: Invalid authentication token"
                elif not m or m[1] not in outer.logs:
                    code, body = 404, f"Job {m[1] if m else '?'} does not exist".encode()
                else:
                    code, body = 200, json.dumps({"logs": outer.logs[m[1]]}).encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.server.server_address[1])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class KubeApi:
    """``with KubeApi() as api: kube = api.client()``."""

    def __init__(self) -> None:
        self.state = State()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(self.state))
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def add_head(self, pod: dict[str, Any], dashboard: tuple[str, int]) -> None:
        """A Ray head pod whose dashboard port (8265) is ``dashboard`` on loopback."""
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        self.state.pods[key] = pod
        self.state.pod_ports[key] = {8265: dashboard}

    def client(self):
        from kubernetes import client

        from ops.clients.kube import Kube

        configuration = client.Configuration()
        configuration.host = self.url
        return Kube(client.ApiClient(configuration))

    def __enter__(self) -> KubeApi:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
