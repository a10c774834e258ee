"""rigs/serve_local.py: finding the Serve replicas' processes of a local cluster."""

from __future__ import annotations

import asyncio
import os
import time
from types import SimpleNamespace
from typing import Any, cast

import pytest

from rigs import serve_local
from workloads.common import procfs

TITLES = {
    11: "ray::ServeReplica:llm:Generate",
    12: "ray::ServeReplica:llm:Generate.handle_request_with_rejection",  # serving a request
    13: "ray::ServeReplica:llm:Generate_v2",
    14: "ray::ServeReplica:llm:Ingress.__call__",
    15: "ray::ServeController",
    21: "ray::ServeReplica:chat:Generate",
}


def test_replicas_are_found_idle_or_busy(monkeypatch):
    """Ray retitles a replica with the method it runs: under load, a replica that was serving a
    request when the rig looked was missed, and the HA rehearsal said it had been restarted."""
    cluster = cast(Any, SimpleNamespace(nodes=[SimpleNamespace(proc=SimpleNamespace(pid=p)) for p in (1, 2)]))
    children = {1: [11, 12, 13, 14, 15], 2: [21]}
    monkeypatch.setattr(procfs, "descendants", lambda pid: children[pid])
    monkeypatch.setattr(serve_local, "cmdline", TITLES.__getitem__)
    assert serve_local.replica_pids(cluster) == [11, 12, 21]
    assert serve_local.replica_pids(cluster, deployment="Ingress") == [14]


@pytest.mark.ray_cluster
@pytest.mark.timeout(180)
def test_ray_titles_a_busy_actor_with_its_method():
    """What `replica_pids` relies on, checked on a real Ray worker."""
    import ray

    with serve_local.LocalCluster(worker_nodes=1, cpus_per_node=1):

        @ray.remote(num_cpus=0)
        class Busy:
            async def work(self) -> None:
                await asyncio.sleep(3)

            def pid(self) -> int:
                return os.getpid()

        actor = Busy.remote()  # type: ignore[attr-defined]
        pid = ray.get(actor.pid.remote())
        idle = procfs.cmdline(pid)
        ref = actor.work.remote()
        titles = set()
        for _ in range(25):
            titles.add(procfs.cmdline(pid))
            if "ray::Busy.work" in titles:
                break
            time.sleep(0.1)
        ray.get(ref)
        assert (idle, "ray::Busy.work" in titles) == ("ray::Busy", True), titles
