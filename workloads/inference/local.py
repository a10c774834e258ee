"""A local multi-node Ray cluster on 127.0.0.1 for the serve tests, rehearsal and benchmarks.

Every node is a ``ray start --block`` process in its own session, so that stopping the cluster
(or killing a node) signals only our process group, never another engineer's Ray. Every port is
picked free at start (GCS, dashboard, node/object managers, agents, metrics, worker port ranges)
and the head gets its own temp dir, so clusters started at the same time never collide. The
``loopback`` hook directory goes on PYTHONPATH: its sitecustomize keeps Ray from probing cloud
metadata or reporting usage (no traffic leaves 127.0.0.1).
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
HOOKS = Path(__file__).resolve().parent / "loopback"
MiB = 1 << 20

# This process is a Ray driver too: stub the metadata probe in-process as well.
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
sys.path.insert(0, str(HOOKS))
import sitecustomize as _loopback  # noqa: E402,F401  (the hook module of this directory)

sys.path.remove(str(HOOKS))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_range(n: int = 40) -> tuple[int, int]:
    """A run of ``n`` free ports for a node's worker processes, away from Ray's defaults."""
    for _ in range(200):
        lo = random.randrange(30000, 60000 - n)
        if all(_port_free(p) for p in range(lo, lo + n)):
            return lo, lo + n - 1
    raise RuntimeError("no free port range for Ray workers")


def loopback_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    # At 0, worker nodes refuse to join; every node gets --node-ip-address 127.0.0.1 instead.
    env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
    env.update({
        "RAY_USAGE_STATS_ENABLED": "0",
        "PYTHONPATH": os.pathsep.join([str(HOOKS), str(REPO_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    })
    env.update(extra or {})
    return env


@dataclass
class Node:
    name: str
    proc: subprocess.Popen
    head: bool

    @property
    def pgid(self) -> int:
        return self.proc.pid  # a session leader's pid is its process group id


@dataclass
class LocalCluster:
    """``with LocalCluster(workers=2) as c:`` ... ``c.address`` (GCS), ``c.kill_node(name)``."""

    workers: int = 1
    head_cpus: int = 1
    worker_cpus: int = 2
    object_store_mib: int = 96
    env: dict[str, str] = field(default_factory=dict)
    log: object = sys.stderr
    nodes: list[Node] = field(default_factory=list)
    gcs_port: int = 0
    temp_dir: str = ""

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    def _common(self) -> list[str]:
        lo, hi = free_range()
        return [
            "--node-ip-address", "127.0.0.1", "--block", "--disable-usage-stats",
            "--object-store-memory", str(self.object_store_mib * MiB),
            "--node-manager-port", str(free_port()), "--object-manager-port", str(free_port()),
            "--dashboard-agent-listen-port", str(free_port()),
            "--dashboard-agent-grpc-port", str(free_port()),
            "--runtime-env-agent-port", str(free_port()),
            "--metrics-export-port", str(free_port()),
            "--min-worker-port", str(lo), "--max-worker-port", str(hi),
        ]

    def _spawn(self, name: str, args: list[str], head: bool) -> Node:
        logf = open(Path(self.temp_dir) / f"{name}.log", "wb")
        proc = subprocess.Popen(
            [str(Path(sys.executable).with_name("ray")), "start", *args],
            env=loopback_env(self.env), stdout=logf, stderr=subprocess.STDOUT,
            start_new_session=True, cwd=str(REPO_ROOT),
        )
        node = Node(name, proc, head)
        self.nodes.append(node)
        return node

    def start(self, timeout_s: float = 90) -> "LocalCluster":
        # Short path: Ray's unix sockets live under the temp dir (108-byte limit).
        self.temp_dir = tempfile.mkdtemp(prefix="rsrv-", dir="/tmp")
        self.gcs_port = free_port()
        self._spawn("head", [
            "--head", "--port", str(self.gcs_port), "--temp-dir", self.temp_dir,
            "--num-cpus", str(self.head_cpus), "--include-dashboard", "false",
            "--ray-client-server-port", str(free_port()), *self._common(),
        ], head=True)
        self.wait_for_nodes(1, timeout_s)
        # One node at a time: on a loaded machine, nodes starting together overrun Ray's fixed
        # 30 s raylet registration wait; a node that still fails is started once more.
        for i in range(self.workers):
            name = f"worker{i + 1}"
            self.add_worker(name)
            try:
                self.wait_for_nodes(2 + i, timeout_s)
            except RuntimeError:
                self.nodes = [n for n in self.nodes if n.name != name]
                self.add_worker(name)
                self.wait_for_nodes(2 + i, timeout_s)
        return self

    def add_worker(self, name: str) -> Node:
        return self._spawn(name, [
            "--address", self.address, "--num-cpus", str(self.worker_cpus),
            "--resources", f'{{"{name}": 1}}', *self._common(),
        ], head=False)

    def alive_nodes(self) -> int:
        import ray

        return sum(1 for n in ray.nodes() if n["Alive"])

    def wait_for_nodes(self, n: int, timeout_s: float) -> None:
        import ray

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for node in self.nodes:
                if node.proc.poll() is not None:
                    raise RuntimeError(f"ray start for {node.name} exited: see {self.temp_dir}/{node.name}.log:\n"
                                       + (Path(self.temp_dir) / f"{node.name}.log").read_text()[-3000:])
            try:
                if not ray.is_initialized():
                    ray.init(address=self.address, _node_ip_address="127.0.0.1", log_to_driver=False,
                             logging_level="WARNING", configure_logging=False)
                if self.alive_nodes() >= n:
                    return
            except Exception:  # noqa: BLE001 - the GCS is not up yet
                pass
            time.sleep(0.5)
        raise TimeoutError(f"{n} Ray nodes not up after {timeout_s:.0f} s (logs in {self.temp_dir})")

    def kill_node(self, name: str) -> None:
        node = next(n for n in self.nodes if n.name == name)
        _kill_group(node.pgid, signal.SIGKILL)
        node.proc.wait(10)

    def stop(self) -> None:
        import ray

        with contextlib.suppress(Exception):
            if ray.is_initialized():
                ray.shutdown()
        # Ray's worker processes get their own process groups: note them (descendants of our
        # node processes) before the nodes go, and kill any that outlive their raylet.
        workers = [pid for node in self.nodes for pid in _descendants(node.proc.pid)]
        for node in reversed(self.nodes):
            _kill_group(node.pgid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for node in reversed(self.nodes):
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.proc.wait(max(0.1, deadline - time.monotonic()))
            _kill_group(node.pgid, signal.SIGKILL)
        for pid in workers:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        _kill_leftovers(self.temp_dir)
        self.nodes.clear()
        if self.temp_dir:
            shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> "LocalCluster":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _kill_leftovers(temp_dir: str) -> None:
    """Kill (by pid) any process of ours that left its group: those naming our temp dir."""
    if not temp_dir:
        return
    import psutil

    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if any(temp_dir in part for part in (p.info["cmdline"] or [])) and p.pid != os.getpid():
                p.kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue


def _descendants(pid: int) -> list[int]:
    import psutil

    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def replica_pids(cluster: LocalCluster, deployment: str = "Generate") -> list[int]:
    """PIDs of the Serve replica actors of ``deployment`` in this cluster (descendants of our
    node processes whose process title is ``ray::ServeReplica:<app>:<deployment>``)."""
    import psutil

    found = []
    for node in cluster.nodes:
        for pid in _descendants(node.proc.pid):
            try:
                cmd = " ".join(psutil.Process(pid).cmdline()).strip()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            if cmd.startswith("ray::ServeReplica:") and cmd.endswith(f":{deployment}"):
                found.append(pid)
    return sorted(found)
