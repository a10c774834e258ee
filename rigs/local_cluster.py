"""A real multi-node Ray cluster on this machine, for tests and rehearsals.

Every node is a separate ``ray start --block`` in its own process group, with its own ports
(picked free, unless given) under one private temp dir, on 127.0.0.1 only, with memory and
object store sized explicitly; the process that calls ``start`` gets the same loopback pinning
as the nodes (``keep_this_process_on_loopback``). ``kill_node`` SIGKILLs one node (a node
loss); ``stop`` ends every process this cluster started, found by process group and by the
temp dir on their command lines, never by name, so other clusters on the machine are untouched.

One module because it is one object's life: its nodes' environment, ports, start, kill and stop
share the cluster's state, read top to bottom.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from workloads.common import procfs

OFFLINE_HOOK_DIR = Path(__file__).resolve().parent / "_offline"
REPO_ROOT = Path(__file__).resolve().parents[1]


_HANDED_OUT: set[int] = set()


def free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on 127.0.0.1, never one this process handed out before."""
    socks: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < n:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            port = s.getsockname()[1]
            if port not in _HANDED_OUT:
                ports.append(port)
                _HANDED_OUT.add(port)
    finally:
        for s in socks:
            s.close()
    return ports


def free_port() -> int:
    return free_ports(1)[0]


RAY_AUTH_MODE = "RAY_AUTH_MODE"


def keep_this_process_on_loopback() -> None:
    """Apply the offline hook (``_offline/sitecustomize.py``) in this process too.

    The nodes get the hook from PYTHONPATH (``offline_env``), but the process that starts a
    cluster is usually also its driver (``ray.init(address=cluster.address)``), and it was not
    started with that PYTHONPATH: without the hook Ray resolves the 127.0.0.1 address to the
    host's interface, where the GCS does not listen, and ``ray.init`` times out. Idempotent.
    """
    if "_hpray_offline_hook" in sys.modules:
        return
    import importlib.util

    spec = importlib.util.spec_from_file_location("_hpray_offline_hook", OFFLINE_HOOK_DIR / "sitecustomize.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {OFFLINE_HOOK_DIR / 'sitecustomize.py'}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules["_hpray_offline_hook"] = module
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    os.environ.setdefault(RAY_AUTH_MODE, "disabled")  # as the nodes (offline_env)


def offline_env(base: dict[str, Any] | None = None) -> dict[str, Any]:
    """Environment for Ray processes: loopback only, no usage reporting, our hook first."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(OFFLINE_HOOK_DIR), str(REPO_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    # RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER must stay unset (or 1): at 0 worker nodes refuse to join.
    env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
    env.update(RAY_USAGE_STATS_ENABLED="0", RAY_DISABLE_DOCKER_CPU_WARNING="1", PYTHONUNBUFFERED="1")
    # Ray's authentication mode, stated: left unset, `ray start --head` turns token mode on when
    # ~/.ray/auth_token exists (any local ray.init() writes one) while `ray start --address` does
    # not, and the worker nodes are refused. Rigs that rehearse token mode set it themselves.
    env.setdefault(RAY_AUTH_MODE, "disabled")
    return env


@dataclass
class Node:
    name: str
    proc: subprocess.Popen[Any]
    log: Path


@dataclass
class LocalCluster:
    """``head_cpus`` 0 keeps training off the head, as on the cluster."""

    worker_nodes: int = 2
    cpus_per_node: int = 2
    memory_per_node_mib: int = 3072
    object_store_per_node_mib: int = 512
    head_cpus: int = 0
    gcs_port: int | None = None
    dashboard_port: int | None = None
    dashboard: bool = True
    env_extra: dict[str, Any] = field(default_factory=dict)
    # Benchmarks only: a cgroup directory (cgroup v1 `cpu` controller, e.g. with a low
    # cpu.shares) that the head node and every process it starts join, to mirror a cluster whose
    # head runs on other machines (bench/training_throughput.py --mirror-head). Worker nodes then
    # join its parent: left alone they would inherit the cgroup of whoever starts them, which is
    # the head's when that is a driver that joined it.
    head_cgroup: str | None = None
    # Worker nodes share the head's session dir, whose log monitor already forwards their
    # output; True starts one per worker node anyway, as on a real cluster (benchmarks).
    worker_log_monitor: bool = False
    temp_dir: str | None = None
    # Environment and `ray start` arguments of the head node only: GCS fault tolerance
    # (RAY_REDIS_ADDRESS, RAY_external_storage_namespace, --redis-password) is the head's.
    head_env: dict[str, Any] = field(default_factory=dict)
    head_args_extra: list[str] = field(default_factory=list)
    # Delete the temp dir (logs, sockets, spilled objects) after stop; False keeps the logs.
    remove_temp_dir: bool = True
    nodes: list[Node] = field(default_factory=list)

    def temp_path(self) -> Path:
        assert self.temp_dir is not None, "start() sets temp_dir"
        return Path(self.temp_dir)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def env(self) -> dict[str, Any]:
        # RAY_ADDRESS: processes that call ray.init() without an address (Ray Train's
        # placement-group cleaner) must find this cluster, not another one on the machine.
        # RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S: on SIGTERM (stop()) Ray drains a node for up to
        # 30 s so that a RayService's proxies can hand over traffic; a local cluster that is being
        # stopped has none to hand over, and stop() would wait out its grace period instead.
        return {
            **offline_env(),
            "RAY_ADDRESS": self.address,
            "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
            **self.env_extra,
        }

    _PORT_FLAGS = (
        "--node-manager-port",
        "--object-manager-port",
        "--metrics-export-port",
        "--dashboard-agent-listen-port",
        "--dashboard-agent-grpc-port",
        "--runtime-env-agent-port",
    )

    def node_env(self, name: str) -> dict[str, Any]:
        """Environment of node ``name`` ("head", "worker1", ...)."""
        return {**self.env(), **(self.head_env if name == "head" else {})}

    def _ports(self) -> list[str]:
        # 24 private worker ports per node, so concurrent clusters never collide.
        ports = free_ports(len(self._PORT_FLAGS) + 24)
        named, workers = ports[: len(self._PORT_FLAGS)], ports[len(self._PORT_FLAGS) :]
        args = [arg for flag, port in zip(self._PORT_FLAGS, named, strict=True) for arg in (flag, str(port))]
        return [*args, "--worker-port-list", ",".join(str(port) for port in workers)]

    def _start(self, name: str, args: list[str]) -> Node:
        log = self.temp_path() / f"{name}.log"
        cmd = [
            str(Path(sys.executable).with_name("ray")),
            "start",
            "--block",
            "--disable-usage-stats",
            "--node-ip-address",
            "127.0.0.1",
            *args,
            *self._ports(),
        ]
        f = open(log, "ab")  # noqa: SIM115 (the node process writes to it; closed when it stops)
        join = None
        cgroup = self.head_cgroup
        if cgroup and name != "head":
            cgroup = os.path.dirname(cgroup.rstrip("/"))  # worker nodes: outside the head's
        if cgroup:
            procs = os.path.join(cgroup, "cgroup.procs")

            def join() -> None:  # in the child, before exec: every process it starts inherits it
                with open(procs, "w") as cg:
                    cg.write(str(os.getpid()))

        proc = subprocess.Popen(
            cmd,
            stdout=f,
            stderr=subprocess.STDOUT,
            env=self.node_env(name),
            start_new_session=True,
            cwd=str(REPO_ROOT),
            preexec_fn=join,
        )
        node = Node(name, proc, log)
        self.nodes.append(node)
        return node

    def _mem(self) -> list[str]:
        return [
            "--memory",
            str(self.memory_per_node_mib << 20),
            "--object-store-memory",
            str(self.object_store_per_node_mib << 20),
        ]

    def start(self, timeout_s: float = 120) -> Self:
        # Whoever starts a local cluster drives it: keep this process on loopback as well.
        keep_this_process_on_loopback()
        # Short path: Ray's unix sockets live under it (108-byte limit).
        self.temp_dir = self.temp_dir or tempfile.mkdtemp(prefix="rt", dir="/tmp")
        self.gcs_port = self.gcs_port or free_port()
        self.dashboard_port = self.dashboard_port or free_port()
        head_args = [
            "--head",
            "--port",
            str(self.gcs_port),
            "--temp-dir",
            self.temp_dir,
            "--num-cpus",
            str(self.head_cpus),
            "--ray-client-server-port",
            str(free_port()),
            "--include-dashboard",
            "true" if self.dashboard else "false",
            "--dashboard-host",
            "127.0.0.1",
            "--dashboard-port",
            str(self.dashboard_port),
            *self._mem(),
            *self.head_args_extra,
        ]
        self._head_args = head_args
        try:
            self._start("head", head_args)
            self._wait_nodes(1, timeout_s)
            for i in range(self.worker_nodes):
                self.add_worker(wait=False)
                self._wait_nodes(2 + i, timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def add_worker(self, wait: bool = True, timeout_s: float = 120) -> Node:
        i = len(self.nodes)
        node = self._start(
            f"worker{i}",
            [
                "--address",
                self.address,
                "--num-cpus",
                str(self.cpus_per_node),
                "--resources",
                json.dumps({"worker_node": 1}),
                # Nodes share one session dir: the head's log
                # monitor already forwards every worker's output.
                "--include-log-monitor",
                "true" if self.worker_log_monitor else "false",
                *self._mem(),
            ],
        )
        if wait:
            self._wait_nodes(self.alive_count_expected(), timeout_s)
        return node

    def alive_count_expected(self) -> int:
        return sum(1 for n in self.nodes if n.proc.poll() is None)

    def _gcs_listening(self) -> bool:
        """Whether the GCS port accepts connections. Until it does, a GcsClient would block for up
        to a minute waiting for it, and a head that exited meanwhile (bad flags, an untrusted
        store) would go unnoticed."""
        try:
            socket.create_connection(("127.0.0.1", self.gcs_port or 0), timeout=1).close()
        except OSError:
            return False
        return True

    def alive_nodes(self) -> int:
        """Nodes the GCS reports alive."""
        from ray._raylet import GcsClient  # type: ignore[attr-defined]

        if not self._gcs_listening():
            return 0
        try:
            infos = GcsClient(address=self.address).get_all_node_info(timeout=5)
        except Exception:  # the GCS is not up yet
            return 0
        return sum(1 for info in infos.values() if info.state == 0)  # GcsNodeInfo.ALIVE

    def _wait_nodes(self, n: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            head = self.nodes[0]
            if head.proc.poll() is not None:
                raise RuntimeError(f"ray head exited; log:\n{head.log.read_text()[-3000:]}")
            if self.alive_nodes() >= n:
                return
            time.sleep(0.5)
        raise TimeoutError(f"{n} Ray nodes did not come up in {timeout_s:.0f} s (temp dir {self.temp_dir})")

    def worker_processes(self, node: Node) -> list[int]:
        return procfs.descendants(node.proc.pid)

    def processes(self) -> list[int]:
        """Every live process of the cluster: its nodes' ``ray start`` and their descendants."""
        return [p for node in self.nodes for p in [node.proc.pid, *procfs.descendants(node.proc.pid)]]

    def kill_node(self, index: int = 1) -> Node:
        """SIGKILL every process of worker node ``index`` (1 = first worker), like a lost host."""
        node = self.nodes[index]
        # Ray workers call setsid: they are found as descendants of the node, not by group.
        pids = procfs.descendants(node.proc.pid)
        _kill_group(node.proc.pid, signal.SIGKILL)
        for pid in pids:
            _kill(pid, signal.SIGKILL)
        node.proc.wait(timeout=30)
        return node

    def kill_head(self) -> Node:
        """SIGKILL every process of the head node (GCS, raylet, dashboard and the actors on it),
        like a lost head pod. Whoever is connected as a driver through the head must disconnect
        first: Ray ends a driver whose raylet dies."""
        return self.kill_node(0)

    def restart_head(self, timeout_s: float = 120) -> Node:
        """A new head on the same GCS port with the same arguments and environment (KubeRay's
        replacement head pod behind the same Service), waiting until the surviving worker nodes
        are registered with it again."""
        old = self.nodes[0]
        if old.proc.poll() is None:
            raise RuntimeError("the head is still running; kill_head() first")
        deadline = time.monotonic() + timeout_s
        since_ms = int(time.time() * 1000)
        node = self._start_new_head()
        # A recovered GCS still lists the lost head as alive until its health checks fail: wait
        # for the new head's own registration, then for every running worker node. A head that
        # exits first (on a starved machine `ray start` gives up on its own registration) is
        # started again until the deadline, as the head pod's restart policy would.
        while not self._new_head_alive(since_ms):
            if node.proc.poll() is not None:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the new ray head exited; log:\n{node.log.read_text()[-3000:]}")
                _kill_group(node.proc.pid, signal.SIGKILL)  # what the failed start left in its group
                node = self._start_new_head()
            if time.monotonic() > deadline:
                raise TimeoutError(f"the new Ray head did not register in {timeout_s:.0f} s (temp dir {self.temp_dir})")
            time.sleep(0.5)
        self._wait_nodes(self.alive_count_expected(), max(1.0, deadline - time.monotonic()))
        return node

    def _start_new_head(self) -> Node:
        # A new head pod starts with an empty /tmp: `ray start --head` refuses a port that the
        # session dir's bootstrap file names while a GCS process with it is still listed.
        (self.temp_path() / "ray_current_cluster").unlink(missing_ok=True)
        node = self._start("head", self._head_args)
        self.nodes.remove(node)
        self.nodes[0] = node
        return node

    def _new_head_alive(self, since_ms: int) -> bool:
        from ray._raylet import GcsClient  # type: ignore[attr-defined]

        if not self._gcs_listening():
            return False
        try:
            infos = GcsClient(address=self.address).get_all_node_info(timeout=5)
        except Exception:  # the GCS is not up yet
            return False
        return any(i.state == 0 and i.is_head_node and i.start_time_ms >= since_ms for i in infos.values())

    def stop(self) -> None:
        """End every process this cluster started (workers first, then the head)."""
        tree = {node.proc.pid: procfs.descendants(node.proc.pid) for node in self.nodes}
        for node in reversed(self.nodes):
            if node.proc.poll() is None:
                _kill_group(node.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for node in self.nodes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        for node in self.nodes:
            _kill_group(node.proc.pid, signal.SIGKILL)
            for pid in tree[node.proc.pid]:
                _kill(pid, signal.SIGKILL)
        # Anything that left our process groups but still runs from our temp dir.
        if self.temp_dir:
            for pid in _pids_mentioning(self.temp_dir):
                _kill(pid, signal.SIGKILL)
            if self.remove_temp_dir:
                import shutil

                shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _kill(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _pids_mentioning(text: str) -> list[int]:
    needle = text.encode()
    return [p for p in procfs.pids() if p != os.getpid() and needle in (procfs.read(p, "cmdline") or b"")]
