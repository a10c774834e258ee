"""The local Ray cluster of the serve tests, rehearsal and benchmarks: the training workload's
``workloads.common.local_cluster.LocalCluster`` (every node a ``ray start --block`` in its own
process group, free ports, private temp dir, 127.0.0.1 only, stopped by group and temp dir, never
by name) with this process connected as the Ray driver while it runs, which Serve's deploy API
needs; plus /proc helpers to find the replicas and their CPU time.

Importing this module also loads ``workloads/common/_offline/sitecustomize.py`` into this process
(the nodes get it through PYTHONPATH): the driver stays on 127.0.0.1 too and Ray never probes
cloud metadata or reports usage from here.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

from workloads.common import local_cluster as _common
from workloads.common.local_cluster import REPO_ROOT, _descendants, free_port, keep_this_process_on_loopback

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

    def start(self, timeout_s: float = 120) -> "LocalCluster":
        import ray

        if ray.is_initialized():
            # A process drives one Ray cluster at a time; this one becomes the connected one.
            ray.shutdown()
        super().start(timeout_s)
        try:
            ray.init(address=self.address, _node_ip_address="127.0.0.1", log_to_driver=False,
                     logging_level="WARNING", configure_logging=False)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        import ray

        with contextlib.suppress(Exception):
            if ray.is_initialized():
                ray.shutdown()
        super().stop()


# Processes through /proc (psutil is only importable here through Ray's vendored copy).


def _read(pid: int, name: str) -> bytes:
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read()
    except OSError:
        return b""


def cmdline(pid: int) -> str:
    return _read(pid, "cmdline").replace(b"\0", b" ").decode(errors="replace").strip()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far (0 if it is gone)."""
    raw = _read(pid, "stat").decode(errors="replace")
    f = raw[raw.rfind(")") + 2:].split() if raw else []  # the fields after "(comm)"
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK") if len(f) > 12 else 0.0


def replica_pids(cluster: LocalCluster, deployment: str = "Generate") -> list[int]:
    """PIDs of the Serve replica actors of ``deployment`` in this cluster (descendants of our
    node processes whose process title is ``ray::ServeReplica:<app>:<deployment>``)."""
    found = []
    for node in cluster.nodes:
        for pid in _descendants(node.proc.pid):
            cmd = cmdline(pid)
            if cmd.startswith("ray::ServeReplica:") and cmd.endswith(f":{deployment}"):
                found.append(pid)
    return sorted(found)


__all__ = ["LocalCluster", "REPO_ROOT", "cmdline", "cpu_seconds", "free_port", "replica_pids"]
