"""The local Ray cluster of the serve tests, rehearsal and benchmarks: the training workload's
``rigs.local_cluster.LocalCluster`` (every node a ``ray start --block`` in its own
process group, free ports, private temp dir, 127.0.0.1 only, stopped by group and temp dir, never
by name) with this process connected as the Ray driver while it runs, which Serve's deploy API
needs; plus /proc helpers to find the replicas and their CPU time.

``serve_env`` (``serve_config.ray_env(env)``) puts Serve's mode on every node, as the RayService
does on every container; with HAProxy on, its files and fixed ports are made private to the
cluster (``_local_haproxy_env``).

Importing this module also loads ``rigs/_offline/sitecustomize.py`` into this process
(the nodes get it through PYTHONPATH): the driver stays on 127.0.0.1 too and Ray never probes
cloud metadata or reports usage from here.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import tempfile
from dataclasses import dataclass, field
from typing import Any, Self

from rigs import local_cluster as _common
from rigs.local_cluster import REPO_ROOT, free_port, free_ports, keep_this_process_on_loopback
from workloads.common import procfs

# At import, not only in start(): callers import this module before anything else of Ray.
keep_this_process_on_loopback()


@dataclass
class LocalCluster(_common.LocalCluster):
    """``with LocalCluster(worker_nodes=1, cpus_per_node=2) as c:`` ... (driver connected).

    Serve defaults: no dashboard (the deploy path used here does not need it, and its processes
    would take CPU from the measured ones), and a small object store (Serve passes requests and
    responses inline, not through the object store).
    """

    dashboard: bool = False
    memory_per_node_mib: int = 2048
    object_store_per_node_mib: int = 128
    # Serve's environment on every node, as on the cluster: ``serve_config.ray_env(env)``.
    serve_env: dict[str, Any] = field(default_factory=dict)
    # A proxy on the worker nodes too (``proxy_location: EveryNode``, as on the cluster, where
    # the serve Service excludes the head): each worker's proxy binds this port (Serve's
    # RAY_SERVE_WORKER_PROXY_HTTP_PORT; the head keeps http_options.port) and, with HAProxy,
    # gets its own HAProxy files and ports, since every node here shares one address.
    worker_proxy_port: int | None = None

    def start(self, timeout_s: float = 120) -> Self:
        import ray

        if ray.is_initialized():
            # A process drives one Ray cluster at a time; this one becomes the connected one.
            ray.shutdown()
        self.temp_dir = self.temp_dir or tempfile.mkdtemp(prefix="rt", dir="/tmp")
        self.env_extra = {**self.serve_env, **_local_haproxy_env(self.serve_env, self.temp_dir), **self.env_extra}
        super().start(timeout_s)
        try:
            ray.init(
                address=self.address,
                _node_ip_address="127.0.0.1",
                log_to_driver=False,
                logging_level=logging.WARNING,
                configure_logging=False,
            )
        except BaseException:
            self.stop()
            raise
        return self

    def node_env(self, name: str) -> dict[str, Any]:
        env = super().node_env(name)
        if name != "head" and self.worker_proxy_port is not None:
            env["RAY_SERVE_WORKER_PROXY_HTTP_PORT"] = str(self.worker_proxy_port)
            assert self.temp_dir is not None  # set by start()
            env.update(_local_haproxy_env(self.serve_env, os.path.join(self.temp_dir, name)))
        return env

    def stop(self) -> None:
        import ray

        with contextlib.suppress(Exception):
            if ray.is_initialized():
                ray.shutdown()
        super().stop()


def _local_haproxy_env(serve_env: dict[str, Any], temp_dir: str) -> dict[str, Any]:
    """Local only: HAProxy's files and fixed ports made private to this cluster.

    Ray's defaults are one set per machine (/tmp/haproxy-serve/..., stats 8404, metrics 9101,
    fallback proxy 8500/9500): right for a pod, but two clusters on this machine (two engineers'
    tests) would share a config file and collide on the ports. Replicas and the HAProxy frontend
    bind http_options.host (127.0.0.1 here); the stats and metrics listeners of Ray's HAProxy
    template bind every interface, on these private ports, and nothing but this machine uses them.
    """
    if serve_env.get("RAY_SERVE_ENABLE_HA_PROXY") != "1":
        return {}
    d = os.path.join(temp_dir, "haproxy")
    stats, metrics, http, grpc = free_ports(4)
    return {
        "RAY_SERVE_HAPROXY_CONFIG_FILE_LOC": os.path.join(d, "haproxy.cfg"),
        "RAY_SERVE_HAPROXY_SOCKET_PATH": os.path.join(d, "admin.sock"),
        "RAY_SERVE_HAPROXY_SERVER_STATE_BASE": d,
        "RAY_SERVE_HAPROXY_SERVER_STATE_FILE": os.path.join(d, "server-state"),
        "RAY_SERVE_HAPROXY_METRICS_SOCKET_PATH": os.path.join(d, "metrics.sock"),
        "RAY_SERVE_HAPROXY_STATS_PORT": str(stats),
        "RAY_SERVE_HAPROXY_METRICS_PORT": str(metrics),
        "RAY_SERVE_FALLBACK_PROXY_HTTP_PORT": str(http),
        "RAY_SERVE_FALLBACK_PROXY_GRPC_PORT": str(grpc),
    }


# Processes through /proc: the project's one reader (workloads.common.procfs).
cmdline = procfs.cmdline
cpu_seconds = procfs.cpu_seconds


def listener_pid(port: int) -> int | None:
    """The process listening on TCP ``port``."""
    return procfs.listening_ports().get(port)


def replica_pids(cluster: LocalCluster, deployment: str = "Generate") -> list[int]:
    """PIDs of the Serve replica actors of ``deployment`` in this cluster: descendants of our
    node processes titled ``ray::ServeReplica:<app>:<deployment>``, or, while a replica runs a
    request, ``ray::ServeReplica:<app>:<deployment>.<method>`` (Ray titles a busy actor with the
    method it runs)."""
    title = re.compile(rf"ray::ServeReplica:[^:]+:{re.escape(deployment)}(\.\w+)?")
    found = []
    for node in cluster.nodes:
        for pid in procfs.descendants(node.proc.pid):
            if title.fullmatch(cmdline(pid)):
                found.append(pid)
    return sorted(found)


__all__ = ["REPO_ROOT", "LocalCluster", "cmdline", "cpu_seconds", "free_port", "listener_pid", "replica_pids"]
