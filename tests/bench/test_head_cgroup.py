"""bench/head_cgroup.py (training_throughput.py --mirror-head): the head node in a low-weight
cgroup, the worker node (and so the ranks) outside it, and a loud failure when that does not hold. Real cgroups
(the cgroup v1 `cpu` controller, as on this machine) and real processes; no Ray needed for the
guard itself, one real local cluster for the wiring."""

from __future__ import annotations

import contextlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench import head_cgroup as hc
from workloads.common import procfs

needs_cgroup = pytest.mark.skipif(
    not os.access(hc.CGROUP_CPU / "cgroup.procs", os.W_OK),
    reason=f"needs a writable cgroup v1 cpu controller at {hc.CGROUP_CPU} (bench --mirror-head only)",
)


@dataclass
class _Node:
    name: str
    proc: subprocess.Popen


@dataclass
class _Cluster:
    nodes: list


def _sleeper(cgroup: Path | None) -> subprocess.Popen:
    def join() -> None:
        (cgroup / "cgroup.procs").write_text(str(os.getpid()))

    return subprocess.Popen(["sleep", "60"], preexec_fn=join if cgroup else None)


@contextlib.contextmanager
def _two_nodes(head: Path, worker: Path):
    """A stand-in cluster: a "head" and a "worker1" process started in the given cgroups."""
    nodes = [_Node("head", _sleeper(head)), _Node("worker1", _sleeper(worker))]
    try:
        yield _Cluster(nodes)
    finally:
        for n in nodes:
            n.proc.kill()
            n.proc.wait()


@needs_cgroup
def test_check_passes_with_the_head_inside_and_the_worker_node_outside():
    with hc.HeadCgroup() as cg, _two_nodes(cg.path, hc.CGROUP_CPU) as cluster:
        assert (cg.path / "cpu.shares").read_text().strip() == str(hc.HEAD_CPU_SHARES)  # the bench's weight
        cg.check(cluster)


@needs_cgroup
def test_check_fails_loudly_when_the_worker_node_inherited_the_head_cgroup():
    with hc.HeadCgroup() as cg, _two_nodes(cg.path, cg.path) as cluster, pytest.raises(RuntimeError) as err:
        cg.check(cluster)
    assert str(err.value) == (
        f"--mirror-head: worker1 node process {cluster.nodes[1].proc.pid} is in cpu cgroup "
        f"/{cg.path.name}; expected anything but /{cg.path.name}"
    )


@needs_cgroup
@pytest.mark.slow
@pytest.mark.ray_cluster
def test_local_cluster_starts_worker_nodes_outside_the_head_cgroup_of_its_driver():
    """The bench's driver joins the head's cgroup before it starts the cluster (a RayJob's
    driver runs on the head); the worker node it starts must not inherit that."""
    # The wiring, not the weight, is under test: at the bench's lowest weight a head beside a CPU
    # hog took longer to start than `ray start` waits (30 s, fixed in Ray 2.60) and gave up.
    from rigs.local_cluster import LocalCluster

    with hc.HeadCgroup(shares=1024) as cg:
        cluster = LocalCluster(
            worker_nodes=1,
            cpus_per_node=1,
            memory_per_node_mib=1024,
            object_store_per_node_mib=256,
            dashboard=False,
            head_cgroup=str(cg.path),
        )
        cg.join()
        try:
            cluster.start()
            cg.check(cluster)
            raylets = {
                n.name: [p for p in cluster.worker_processes(n) if b"raylet" in (procfs.argv(p) or [b""])[0]]
                for n in cluster.nodes
            }
            assert [procfs.cgroup(p, "cpu") for p in raylets["head"]] == [f"/{cg.path.name}"]
            assert [procfs.cgroup(p, "cpu") for p in raylets["worker1"]] == [procfs.cgroup(1, "cpu")]
        finally:
            cg.leave()
            cluster.stop()
