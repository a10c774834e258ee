"""``endpoint inference|llm``: a local port to a Ray Serve service's endpoint (port 8000 of
one of its Serve workers), through the Kubernetes API's pod port-forward, as ``dashboard`` does
for 8265; and what a caller inside the cluster needs instead: its namespace labelled
``hyperpod-ray/serve-client=true`` (manifests/network_policy.py, docs/security.md)."""

from __future__ import annotations

import socket
from typing import Any

from ops.commands.rollout import SERVICES  # the services rollout starts: the ones there are to reach
from ops.context import Command, CommandSpec
from ops.errors import EXIT_INTERRUPTED, JobNotFoundError, NotFoundError, OpsError
from ops.output import to_json
from ops.usage import CommandLine


def register(sub: Any, cli: CommandLine) -> None:
    from config.facts.names import SERVE_CLIENT_LABEL

    p = sub.add_parser(
        "endpoint",
        prog=f"{cli.prog} endpoint",
        usage="%(prog)s SERVICE --env NAME [--port N]",
        help="reach a service's endpoint on a local port",
        formatter_class=cli.formatter,
        description=(
            "Forward a local port to the Serve endpoint (8000) of the service's Ray Serve workers through the\n"
            "Kubernetes API's pod port-forward (no kubectl needed) and print the local URL; Ctrl-C stops it.\n"
            "A caller inside the cluster uses the Service instead, from a namespace labelled\n"
            f"{SERVE_CLIENT_LABEL}=true (the namespace's NetworkPolicies admit no other):\n"
            f"  kubectl label namespace MY-NAMESPACE {SERVE_CLIENT_LABEL}=true\n\n"
            "examples:\n"
            f"  {cli.prog} endpoint llm --env dev --port 8000\n"
            f"  {cli.prog} endpoint inference --env dev --json"
        ),
    )
    p.add_argument("service", metavar="SERVICE", choices=list(SERVICES), help="inference or llm")
    cli.common(p, kube=True)
    p.add_argument(
        "--port", type=int, default=8000, metavar="N", help="local port (default: %(default)s; 0: any free one)"
    )


def serve_worker(kube: Any, namespace: str, name: str, *, prog: str, env: str) -> tuple[dict[str, Any], str]:
    """(the RayService, a running and ready Serve worker pod of its active cluster)."""
    from ops.jobs.inspection import _cluster, pod_row

    try:
        service = {"kind": "RayService", **kube.get_ray("RayService", namespace, name)}
    except NotFoundError:
        raise JobNotFoundError(
            f"no RayService {name!r} in namespace {namespace}", f"start it with: {prog} rollout SERVICE --env {env}"
        ) from None
    cluster = _cluster(service)
    pods = kube.list_pods(namespace, f"ray.io/cluster={cluster}") if cluster else []
    rows = [pod_row(p) for p in pods]
    ready = [
        r["name"]
        for r in rows
        if r["type"] != "head" and r["phase"] == "Running" and r["ready"].split("/")[0] == r["ready"].split("/")[1]
    ]
    if not ready:
        raise OpsError(
            f"RayService {namespace}/{name} has no ready Serve worker now (Ray cluster {cluster or '-'})",
            f"follow its rollout: {prog} describe {name} --env {env}",
        )
    return service, sorted(ready)[0]


def run(command: Command) -> int:
    from config.facts.names import SERVE_CLIENT_LABEL, SERVE_PORT
    from manifests import registry
    from manifests.k8s import NAMESPACE
    from ops.clients.portforward import forward

    args, config = command.args, command.config
    key = SERVICES[args.service]
    planned = registry.plan_of(config).workloads.get(key)
    if planned is None:
        raise OpsError(
            f"{config.name} deploys no {args.service} service",
            "turn it on (inference.llm.enabled) and roll it out: "
            + f"{command.prog} rollout {args.service} --env {config.name}",
        )
    name = planned.name
    kube = command.kube()
    _, pod = serve_worker(kube, NAMESPACE, name, prog=command.prog, env=config.name)
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("127.0.0.1", args.port))
    except OSError as err:
        raise OpsError(
            f"cannot listen on 127.0.0.1:{args.port}: {err}", "pick another with --port N (0: any free port)"
        ) from None
    listener.listen(16)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    in_cluster = f"http://{name}-serve-svc.{NAMESPACE}.svc.cluster.local:{SERVE_PORT}"
    try_it = (
        f"curl {url}/v1/chat/completions -H 'Content-Type: application/json' "
        f'-d \'{{"model": "{config.inference.llm.model_id}", "messages": [{{"role": "user", "content": "Hello"}}]}}\''
        if args.service == "llm"
        else f"curl {url}/ -H 'Content-Type: application/json' -d '{{\"prompt\": \"Hello\"}}'"
    )
    if args.json:
        info = {
            "service": name,
            "pod": pod,
            "url": url,
            "in_cluster_url": in_cluster,
            "client_label": f"{SERVE_CLIENT_LABEL}=true",
        }
        print(to_json(info, compact=True), file=command.out)
    else:
        print(
            f"Serve endpoint of RayService {NAMESPACE}/{name} (pod {pod}): {url}\n"
            f"  try:        {try_it}\n"
            f"  in-cluster: {in_cluster}, from a namespace labelled {SERVE_CLIENT_LABEL}=true\n"
            f"              (kubectl label namespace MY-NAMESPACE {SERVE_CLIENT_LABEL}=true)\n"
            "Ctrl-C to stop forwarding.",
            file=command.out,
        )
    command.out.flush()
    try:
        forward(kube, NAMESPACE, pod, SERVE_PORT, listener)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    finally:
        listener.close()
    return EXIT_INTERRUPTED


COMMAND = CommandSpec("endpoint", register, run=run)
