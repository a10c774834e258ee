"""NetworkPolicies of the Ray workloads' namespace, rendered from the same config as the RayJob
and RayServices (``python -m manifests render network-policies --env NAME``).

Ingress only, default deny: a pod of the namespace accepts
- any TCP from the pods of its own workload (one RayJob or RayService: head and workers; the
  HTTPMode RayJob has no submitter pod). Ray's raylets, object managers, agents and worker processes listen on
  ports Ray picks at start-up, so within one workload every port is open, and nothing else is;
- on the head: the ports the KubeRay operator's pods (in the operator's namespace) call,
  ``operator_ports``: the dashboard/Jobs API (8265), and Serve (8000) only for a RayService whose
  head serves traffic (none here: ``excludeHeadPodFromServeSvc``);
- for a RayService: Serve (8000) from pods in namespaces labelled ``SERVE_CLIENT_LABEL=true``
  (the Serve ingress path: in-cluster clients or an ingress controller placed there), on the pods
  the Serve Service routes to (the workers where the head is excluded from it).
- on Ray's metrics port (8080, KubeRay's metrics-export-port) of every Ray pod: the Amazon Managed
  Prometheus collector, whose ENIs sit in the VPC's primary CIDR (``ray-metrics-from-collector``).
  Pods cannot be told apart from the collector by address there: pods on the system nodes draw
  their IPs from the same subnets and may read the metrics too (read-only text), while HyperPod
  pods (secondary CIDR) may not.
Everything else is dropped, the Jobs API and the GCS from any other namespace or workload
included.
``kubectl port-forward`` reaches pods through the kubelet, which policies do not filter.

A RayService's NewCluster upgrade runs two clusters of one workload side by side; they share
the workload's rule (KubeRay names clusters at run time, so no static policy can tell them apart).

``POD_FLOWS`` lists what the policies allow in the shape of the platform's flow table
(constructs/flows.py on main: parts ``ray-head``, ``ray-workers``, ``kuberay-operator``).
"""

from __future__ import annotations

from typing import Any

from config import observability as obs
from config.environment import EnvironmentConfig
from config.facts import names
from config.facts.jobs import JOBS_WORKLOAD
from config.facts.names import KUBERAY_NAMESPACE, RAY_DASHBOARD_PORT, SERVE_PORT
from manifests import k8s, registry, security

# The chart's app.kubernetes.io/name (kuberay-operator, no nameOverride in constructs/kuberay.py);
# tests check it against the rendered chart.
OPERATOR_POD_LABELS = {"app.kubernetes.io/name": "kuberay-operator"}
NODE_TYPE_LABEL = k8s.NODE_TYPE_LABEL
# KubeRay's defaults, and the ports the head template names "dashboard" and "serve"
# (ray-operator/controllers/ray/utils/constant.go:107 and :110 at v1.7.0).
DASHBOARD_PORT = RAY_DASHBOARD_PORT
SERVE_CLIENT_LABEL = names.SERVE_CLIENT_LABEL


def _policy(
    name: str, pod_selector: dict[str, str], ingress: list[dict[str, Any]], namespace: str = k8s.NAMESPACE
) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace, "labels": k8s.labels("ray", "network-policy")},
        "spec": {"podSelector": {"matchLabels": pod_selector}, "policyTypes": ["Ingress"], "ingress": ingress},
    }


def _tcp(*ports: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": p} for p in ports]


def _operator_peer() -> dict[str, Any]:
    return {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": KUBERAY_NAMESPACE}},
        "podSelector": {"matchLabels": dict(OPERATOR_POD_LABELS)},
    }


def operator_ports(*, serve: bool, head_serves: bool) -> tuple[int, ...]:
    """The head ports KubeRay 1.7's operator calls (ray-operator/controllers/ray/ at v1.7.0):
    - the dashboard, through the head Service's ``dashboard`` port (utils/util.go:1022
      FetchHeadServiceURL): HTTPMode RayJob submission and status (rayjob_controller.go:218, :296),
      RayService Serve applications (rayservice_controller.go:2014, :2018);
    - Serve's proxy health (``-/healthz``, utils/httpproxy_httpclient.go:28) on the head pod's
      ``serve`` port, only for a RayService whose head serves: rayservice_controller.go:2104-2106
      skips the check with ``excludeHeadPodFromServeSvc``."""
    return (DASHBOARD_PORT, SERVE_PORT) if serve and head_serves else (DASHBOARD_PORT,)


def workload_policies(
    workload: str,
    *,
    serve: bool,
    head_serves: bool = False,
    namespace: str = k8s.NAMESPACE,
    port: int = SERVE_PORT,
    clients_label: str = names.SERVE_CLIENT_LABEL,
) -> list[dict[str, Any]]:
    """The policies of one RayJob (``serve`` False) or RayService (True) named ``workload``;
    ``head_serves``: the RayService's head is in its Serve Service (``excludeHeadPodFromServeSvc``
    false, KubeRay's default); ``port``: its Serve port, which pods of namespaces labelled
    ``clients_label=true`` may call."""
    own = security.workload_labels(workload)
    head = {**own, NODE_TYPE_LABEL: "head"}
    serving = own if head_serves else {**own, NODE_TYPE_LABEL: "worker"}
    out = [
        _policy(f"{workload}-ray-internal", own, [{"from": [{"podSelector": {"matchLabels": dict(own)}}]}], namespace),
        _policy(
            f"{workload}-from-operator",
            head,
            [{"from": [_operator_peer()], "ports": _tcp(*operator_ports(serve=serve, head_serves=head_serves))}],
            namespace,
        ),
    ]
    if serve:
        out.append(
            _policy(
                f"{workload}-serve-ingress",
                serving,
                [
                    {
                        "from": [{"namespaceSelector": {"matchLabels": {clients_label: "true"}}}],
                        "ports": _tcp(port),
                    }
                ],
            )
        )
    return out


def default_deny(namespace: str = k8s.NAMESPACE) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": "default-deny-ingress",
            "namespace": namespace,
            "labels": k8s.labels("ray", "network-policy"),
        },
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
    }


def metrics_policy(cfg: EnvironmentConfig, namespace: str = k8s.NAMESPACE) -> dict[str, Any]:
    """Ray's metrics port on every Ray pod from the VPC's primary CIDR, where the managed
    collector's ENIs are (constructs/observability.py)."""
    return _metrics_policy(cfg.network.vpc_cidr, namespace)


def _metrics_policy(vpc_cidr: str, namespace: str) -> dict[str, Any]:
    policy = _policy(
        "ray-metrics-from-collector",
        {},
        [{"from": [{"ipBlock": {"cidr": vpc_cidr}}], "ports": _tcp(obs.RAY_METRICS_PORT)}],
        namespace,
    )
    policy["spec"]["podSelector"] = {"matchExpressions": [{"key": NODE_TYPE_LABEL, "operator": "Exists"}]}
    return policy


def head_serves(manifest: dict[str, Any]) -> bool:
    """Whether KubeRay puts the head of ``manifest`` (a RayService) in its Serve Service."""
    return manifest["kind"] == "RayService" and not manifest["spec"].get("excludeHeadPodFromServeSvc", False)


def workloads(cfg: EnvironmentConfig) -> list[tuple[str, registry.Serving | None]]:
    """(workload name, what it serves: None for a RayJob) of every RayJob/RayService the registry
    renders for ``cfg`` (manifests/registry.py, with a plan or not): the RayJobs, the one workload
    all ``hpray submit job`` RayJobs share (config/facts/jobs.py), then the RayServices."""
    deployed = registry.deployed(cfg)
    jobs: list[tuple[str, registry.Serving | None]] = [(name, None) for w, name in deployed if w.kind == "RayJob"]
    services = [(name, w.serves or registry.Serving()) for w, name in deployed if w.kind == "RayService"]
    return [*jobs, (JOBS_WORKLOAD, None), *services]


def team_policies(namespace: str, *, vpc_cidr: str) -> list[dict[str, Any]]:
    """A team namespace's policies (constructs/team_access.py): the same default deny, the
    rules of the one workload its ``hpray submit job`` RayJobs share (config/facts/jobs.py), and the
    metrics collector's scrapes (the VPC's primary CIDR ``vpc_cidr``)."""
    return [
        default_deny(namespace),
        *workload_policies(JOBS_WORKLOAD, serve=False, namespace=namespace),
        _metrics_policy(vpc_cidr, namespace),
    ]


def render(cfg: EnvironmentConfig) -> dict[str, Any]:
    """A v1 List of the namespace's NetworkPolicies for ``cfg``."""
    items = [default_deny()]
    for name, serves in workloads(cfg):
        if serves is None:
            items += workload_policies(name, serve=False)
        else:
            items += workload_policies(
                name, serve=True, head_serves=serves.head_serves, port=serves.port, clients_label=serves.clients_label
            )
    items.append(metrics_policy(cfg))
    return {"apiVersion": "v1", "kind": "List", "items": items}


# What the policies allow, as rows for the platform's flow table: (name, source part,
# destination part, protocol, (from port, to port), why).
POD_FLOWS: tuple[tuple[str, str, str, str, tuple[int, int], str], ...] = (
    (
        "netpol:head<->workers",
        "ray-workers",
        "ray-head",
        "tcp",
        (0, 65535),
        "Pods of one RayJob/RayService reach each other on every port (Ray picks most ports at start).",
    ),
    (
        "netpol:head->workers",
        "ray-head",
        "ray-workers",
        "tcp",
        (0, 65535),
        "The head's GCS and drivers call the workers' raylets and workers.",
    ),
    (
        "netpol:workers<->workers",
        "ray-workers",
        "ray-workers",
        "tcp",
        (0, 65535),
        "Object transfers and collectives between worker pods of one workload.",
    ),
    (
        "netpol:operator->head:dashboard",
        "kuberay-operator",
        "ray-head",
        "tcp",
        (DASHBOARD_PORT, DASHBOARD_PORT),
        "KubeRay submits jobs and reads job and Serve status through the dashboard (operator_ports).",
    ),
    (
        "netpol:serve-clients->serve",
        "serve-clients",
        "ray-workers",
        "tcp",
        (SERVE_PORT, SERVE_PORT),
        f"Serve ingress from namespaces labelled {SERVE_CLIENT_LABEL}=true (the heads are excluded from Serve).",
    ),
    (
        "netpol:collector->head:metrics",
        "amp-scraper",
        "ray-head",
        "tcp",
        (obs.RAY_METRICS_PORT, obs.RAY_METRICS_PORT),
        "The managed Prometheus collector scrapes the heads' metrics port (ipBlock: the VPC's primary CIDR).",
    ),
    (
        "netpol:collector->workers:metrics",
        "amp-scraper",
        "ray-workers",
        "tcp",
        (obs.RAY_METRICS_PORT, obs.RAY_METRICS_PORT),
        "The managed Prometheus collector scrapes the workers' metrics port.",
    ),
)
