"""`endpoint inference|llm` (issue 37): a local port relayed through the Kubernetes API's pod
port-forward to a ready Serve worker's 8000 (a real HTTP server on loopback stands in for Serve),
and the label an in-cluster caller's namespace needs."""

from __future__ import annotations

import http.server
import io
import json
import threading
import time
import urllib.request

from ops.cli import main
from tests.ops.fakes import head_pod, rayservice
from tests.ops.kube_api import KubeApi

LOOPBACK_ALLOWED = True


class Serve(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        data = json.dumps({"model": body["model"], "choices": [{"message": {"content": "hi"}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_endpoint_reaches_the_llm_endpoint_and_explains_the_client_label():
    from config import load_environment

    name, cluster = "hpray-prod-llm", "hpray-prod-llm-raycluster-abcde"
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Serve)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    worker = head_pod(cluster)
    worker["metadata"]["name"] = f"{cluster}-llm-worker-x1"
    worker["metadata"]["labels"]["ray.io/node-type"] = "worker"
    worker["status"]["containerStatuses"] = [
        {"name": "ray-worker", "ready": True, "restartCount": 0, "image": "x", "imageID": "x"}
    ]
    with KubeApi() as api:
        service = rayservice(True, name=name)
        service["status"]["activeServiceStatus"]["rayClusterName"] = cluster
        api.state.rayservices[("ray-workloads", name)] = service
        api.state.add_pod(head_pod(cluster))
        api.state.add_pod(worker)
        api.state.pod_ports[("ray-workloads", worker["metadata"]["name"])] = {8000: server.server_address}
        shown = io.StringIO()
        threading.Thread(
            target=main,
            args=(["endpoint", "llm", "--env", "prod", "--port", "0", "--json"],),
            kwargs={
                "out": shown,
                "prog": "hpray",
                "aws_factory": lambda c, p: None,
                "kube_factory": lambda a, c, args: api.client(),
                "token_fn": lambda *a: None,
            },
            daemon=True,
        ).start()
        deadline = time.monotonic() + 30
        while not shown.getvalue().endswith("\n") and time.monotonic() < deadline:
            time.sleep(0.05)
        info = json.loads(shown.getvalue())
        assert (info["service"], info["pod"]) == (name, worker["metadata"]["name"])
        assert info["client_label"] == "hyperpod-ray/serve-client=true"
        assert info["in_cluster_url"] == f"http://{name}-serve-svc.ray-workloads.svc.cluster.local:8000"
        model = load_environment("prod").inference.llm.model_id
        request = urllib.request.Request(
            f"{info['url']}/v1/chat/completions",
            data=json.dumps({"model": model, "messages": [{"role": "user", "content": "Hello"}]}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as r:
            assert json.loads(r.read())["model"] == model
        assert ("ray-workloads", worker["metadata"]["name"], 8000) in api.state.port_forwards
    server.shutdown()


def test_endpoint_says_how_to_start_a_service_that_is_not_there():
    with KubeApi() as api:
        out, err = io.StringIO(), io.StringIO()
        code = main(
            ["endpoint", "inference", "--env", "dev", "--port", "0"],
            out=out,
            err=err,
            prog="hpray",
            aws_factory=lambda c, p: None,
            kube_factory=lambda a, c, args: api.client(),
            token_fn=lambda *a: None,
        )
    assert code == 4
    assert err.getvalue() == (
        "error: no RayService 'hpray-dev-generate' in namespace ray-workloads\n"
        "fix:   start it with: hpray rollout SERVICE --env dev\n"
    )
