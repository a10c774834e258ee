"""--mirror-head of training_throughput.py: the head node, everything it starts and the driver in
a cgroup v1 ``cpu`` group of the lowest weight, as the head pod runs off the GPU nodes."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from workloads.common import procfs

CGROUP_CPU = Path("/sys/fs/cgroup/cpu")  # cgroup v1 `cpu` controller, as mounted on this machine
HEAD_CPU_SHARES = 2  # the minimum: the head's processes get a core only when the ranks leave it idle


class HeadCgroup:
    """--mirror-head: a cgroup with the lowest CPU weight for the head node, everything it
    starts, and this driver (in a RayJob the driver runs in the head pod too), so that they do
    not take CPU from the ranks, as on the cluster, where the head pod runs on the `system`
    nodes and the GPU nodes run only the workers, their raylet, agents and log monitor."""

    def __init__(self, *, shares: int = HEAD_CPU_SHARES) -> None:
        if not (CGROUP_CPU / "cpu.shares").exists():
            raise SystemExit(f"--mirror-head needs the cgroup v1 cpu controller at {CGROUP_CPU}")
        self.path = CGROUP_CPU / f"hpray-bench-head-{os.getpid()}"
        self.shares = shares

    def __enter__(self) -> HeadCgroup:
        self.path.mkdir(exist_ok=True)
        (self.path / "cpu.shares").write_text(str(self.shares))
        return self

    def join(self) -> None:
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def check(self, cluster: Any) -> None:
        """Fail loudly unless every process of the head node is in this cgroup and none of a
        worker node's is (its ranks are started by its raylet and inherit its cgroup). A worker
        node started by a driver inside this cgroup would inherit it: then nothing is mirrored,
        the ranks run at the head's weight (docs/benchmarks.md, "Training throughput")."""
        mine = "/" + self.path.name
        for node in cluster.nodes:
            for pid in [node.proc.pid, *procfs.descendants(node.proc.pid)]:
                cg = procfs.cgroup(pid, "cpu")
                if cg is not None and (cg == mine) != (node.name == "head"):
                    raise RuntimeError(
                        f"--mirror-head: {node.name} node process {pid} is in cpu cgroup {cg}; "
                        f"expected {'' if node.name == 'head' else 'anything but '}{mine}"
                    )

    def leave(self) -> None:
        (CGROUP_CPU / "cgroup.procs").write_text(str(os.getpid()))

    def __exit__(self, *exc: object) -> None:
        self.leave()
        for _ in range(50):  # the cluster's processes are gone (stopped) or about to be
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)
