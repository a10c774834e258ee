"""``dashboard``: a local port forwarded to a Ray head's dashboard through the Kubernetes API.

The same path as ``kubectl port-forward``: each local connection opens the API's pod
``portforward`` subresource (a websocket, with the caller's EKS token) and bytes are relayed both
ways, so no kubeconfig or kubectl is needed.
"""

from __future__ import annotations

import select
import socket
import threading
from typing import Any, TextIO

from ops.clients.ray_head import DASHBOARD_PORT, auth_token, dashboard_url, head_pod, pick_head
from ops.errors import EXIT_INTERRUPTED, OpsError
from ops.output import to_json


def _relay(client: socket.socket, remote: Any) -> None:
    """Copy bytes both ways until either side closes."""
    try:
        while True:
            readable, _, _ = select.select([client, remote], [], [], 60)
            for src, dst in ((client, remote), (remote, client)):
                if src in readable:
                    data = src.recv(65536)
                    if not data:
                        return
                    dst.sendall(data)
    except OSError:
        return
    finally:
        client.close()


def forward(kube: Any, namespace: str, pod: str, remote_port: int, listener: socket.socket) -> None:
    """Serve ``listener`` until interrupted: each connection gets its own API port-forward."""
    from kubernetes.stream import portforward

    while True:
        client, _ = listener.accept()
        try:
            pf = portforward(kube.core.connect_get_namespaced_pod_portforward, pod, namespace, ports=str(remote_port))
            remote = pf.socket(remote_port)
        except Exception as err:  # the API refused (RBAC: pods/portforward) or the pod went away
            client.close()
            raise OpsError(
                f"port-forward to {namespace}/{pod}:{remote_port} failed: {err}",
                "your access entry needs create on pods/portforward in this namespace",
            ) from None
        threading.Thread(target=_relay, args=(client, remote), daemon=True).start()


def serve_dashboard(
    kube: Any,
    namespace: str,
    name: str | None,
    *,
    local_port: int,
    out: TextIO,
    json_mode: bool,
    prog: str,
    env: str,
    token_fn: Any = None,
) -> int:
    """``token_fn(kube, namespace, head_pod)``: the head's Ray token (default: from the Secret its
    container reads, ops/jobs.auth_token)."""
    target, cluster = pick_head(kube, namespace, name, prog=prog, env=env)
    pod = head_pod(kube, namespace, cluster)
    token = (token_fn or auth_token)(kube, namespace, pod)
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("127.0.0.1", local_port))
    except OSError as err:
        raise OpsError(
            f"cannot listen on 127.0.0.1:{local_port}: {err}", "pick another with --port N (0: any free port)"
        ) from None
    listener.listen(16)
    port = listener.getsockname()[1]
    url = dashboard_url(port, token)
    pod_name = pod["metadata"]["name"]
    if json_mode:
        print(
            to_json(
                {"name": target, "ray_cluster": cluster, "pod": pod_name, "url": url, "auth": token is not None},
                compact=True,
            ),
            file=out,
        )
    else:
        print(
            f"Ray dashboard of {target} (head pod {namespace}/{pod_name}): {url}\nCtrl-C to stop forwarding.", file=out
        )
    out.flush()
    try:
        forward(kube, namespace, pod_name, DASHBOARD_PORT, listener)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    finally:
        listener.close()
    return EXIT_INTERRUPTED
