"""Local rehearsal of the generation service losing its Ray head under load (real Ray, real Redis).

    python -m rigs.rehearse_serve_ha [--storage DIR] [--run NAME]

What the RayService does with GCS fault tolerance, on this machine: a private ``redis-server``
(password-protected, TLS only, 127.0.0.1) is the head's GCS store (``RAY_REDIS_ADDRESS``,
``RAY_external_storage_namespace`` and ``--redis-password``: what KubeRay 1.7 sets on the head
from ``gcsFaultToleranceOptions``); one worker node runs the replicas and a Serve proxy, which
takes the traffic (the RayService's serve Service excludes the head). Under steady load, every
process of the head (GCS, raylet, dashboard, the Serve controller and the head's proxy) is
SIGKILLed; after ``--head-down-s`` a new head starts on the same port against the same Redis,
as KubeRay's replacement head pod does.

Reported: requests sent / succeeded / failed and retried by the client, how long the head was
down, when Serve was whole again (controller back, every replica RUNNING, the same replica
processes), and a new deployment after recovery (one more replica: actor creation needs the
GCS). Plot: out/rehearse-serve-ha/latency.png.

One module because it is one rehearsal script: the Redis, the cluster, the load and the head kill are
one timeline whose figures depend on each other.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rigs import loadtest
from rigs.serve_local import LocalCluster, free_port, replica_pids  # loopback hooks first

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "out" / "rehearse-serve-ha"
# KubeRay 1.7 gives GCS-FT worker pods 600 s to reconnect to a restarted GCS
# (utils.DefaultWorkerRayGcsReconnectTimeoutS); Ray's own default is 60 s.
WORKER_GCS_RECONNECT_TIMEOUT_S = "600"
STORAGE_NAMESPACE = "rehearse-serve-ha"


@dataclass
class Redis:
    """A private ``redis-server`` on 127.0.0.1 that speaks only TLS, as ElastiCache with in-transit
    encryption does: its own port, password, directory and certificate authority, no persistence to
    disk (the rehearsal loses the head, not Redis). Stopped by its pid.

    Its certificate names ``TLS_NAME``, never the address the GCS dials: as on the cluster, where
    the head reaches the store through the ExternalName Service's name while ElastiCache's
    certificate names the cache's own endpoint. Ray's GCS (hiredis with BoringSSL) checks the
    chain against the default trust store and not the host name; ``trust_env`` points that store
    at this CA, as the workloads image's /etc/ssl/certs holds the CA that signs ElastiCache's
    certificates."""

    TLS_NAME = "gcs-store.example"

    port: int
    password: str
    proc: subprocess.Popen[bytes]
    dir: str

    @property
    def ca_file(self) -> str:
        return os.path.join(self.dir, "ca.crt")

    @property
    def address(self) -> str:
        """``RAY_REDIS_ADDRESS``: the rediss:// scheme turns on TLS in Ray's client."""
        return f"rediss://127.0.0.1:{self.port}"

    def trust_env(self) -> dict[str, str]:
        """The environment in which a process's default trust store is this server's CA."""
        return {"SSL_CERT_FILE": self.ca_file}

    @classmethod
    def start(cls, timeout_s: float = 20) -> Redis:
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server not found: install the Debian package (`apt-get install redis-server`)")
        port, password, d = free_port(), secrets.token_hex(16), tempfile.mkdtemp(prefix="redis", dir="/tmp")
        _certificates(Path(d), cls.TLS_NAME)
        conf = Path(d) / "redis.conf"
        # The password in a 0600 file, not on a command line other users can read.
        with open(os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            f.write(
                f"port 0\ntls-port {port}\nbind 127.0.0.1\nprotected-mode yes\nrequirepass {password}\n"
                f"tls-cert-file {d}/server.crt\ntls-key-file {d}/server.key\ntls-ca-cert-file {d}/ca.crt\n"
                f'tls-auth-clients no\ndir {d}\nsave ""\nappendonly no\n'
            )
        log = open(Path(d) / "redis.log", "ab")  # noqa: SIM115 (redis-server writes to it until it stops)
        proc = subprocess.Popen([exe, str(conf)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        r = cls(port, password, proc, d)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"redis-server exited: {(Path(d) / 'redis.log').read_text()[-2000:]}")
            if r.ping():
                return r
            time.sleep(0.2)
        r.stop()
        raise TimeoutError(f"redis-server on 127.0.0.1:{port} did not answer in {timeout_s:.0f} s")

    def _command(self, command: str) -> bytes:
        """The reply line of one command after AUTH (RESP over TLS: no client library)."""
        import socket
        import ssl

        tls = ssl.create_default_context(cafile=self.ca_file)
        with (
            socket.create_connection(("127.0.0.1", self.port), timeout=2) as raw,
            tls.wrap_socket(raw, server_hostname=self.TLS_NAME) as s,
        ):
            s.sendall(f"AUTH {self.password}\r\n{command}\r\n".encode())
            data = b""
            while data.count(b"\r\n") < 2:
                chunk = s.recv(256)
                if not chunk:
                    break
                data += chunk
        return data.split(b"\r\n")[1] if data.count(b"\r\n") >= 2 else b""

    def ping(self) -> bool:
        try:
            return self._command("PING") == b"+PONG"
        except OSError:
            return False

    def keys(self) -> int:
        """Keys in the store (all Ray's GCS: the server is this rehearsal's)."""
        return int(self._command("DBSIZE").lstrip(b":"))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


def _certificates(d: Path, name: str) -> None:
    """A throwaway CA (``ca.crt``) and, signed by it, a server certificate for ``name``
    (``server.crt``, ``server.key``), made with the openssl command line."""

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    new_key = ["-newkey", "rsa:2048", "-nodes"]
    openssl("req", "-x509", *new_key, "-days", "2", "-subj", "/CN=rehearsal CA", "-keyout", "ca.key", "-out", "ca.crt")
    openssl("req", *new_key, "-subj", f"/CN={name}", "-keyout", "server.key", "-out", "server.csr")
    (d / "san.cnf").write_text(f"subjectAltName=DNS:{name}\n")
    openssl(
        "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "2", "-extfile", "san.cnf", "-out", "server.crt",
    )  # fmt: skip


def tiny_checkpoint(storage: Path, run: str) -> None:
    """A freshly initialised small GPT saved with the training checkpoint API (no training)."""
    import torch

    from workloads.common import checkpoint as ckpt
    from workloads.common.model import GPT, GPTConfig

    torch.manual_seed(0)
    cfg = GPTConfig(block_size=64, n_layer=2, n_head=2, n_embd=32)
    ckpt.save(
        str(storage / run / ckpt.dir_name(1)),
        {"model": GPT(cfg).state_dict()},
        {"step": 1, "model_config": cfg.to_dict()},
    )


def steady_load(
    url: str,
    *,
    concurrency: int,
    max_tokens: int,
    stop: threading.Event,
    time_limit_s: float,
    on_count: Callable[[int], None],
) -> loadtest.Result:
    """Back-to-back bounded load tests (``concurrency`` x 8 requests each) until ``stop`` is set
    or ``time_limit_s`` passes: a load that spans an outage of unknown length. One Result, with
    start times since the first request; ``on_count(n)`` after each finished request."""
    res = loadtest.Result()
    t0 = time.perf_counter()
    done = 0
    while not stop.is_set() and (offset := time.perf_counter() - t0) < time_limit_s:
        part = loadtest.run(
            url,
            requests=concurrency * 8,
            concurrency=concurrency,
            time_limit_s=time_limit_s - offset,
            max_tokens=max_tokens,
            retry=True,
            on_record=functools.partial(lambda base, n: on_count(base + n), done),
        )
        for r in part.records:
            r.start_s += offset
        res.records += part.records
        done += len(part.records)
    res.wall_s = time.perf_counter() - t0
    return res


def _serve_whole(app: str, deployment: str, replicas: int) -> bool:
    from ray import serve
    from ray.serve._private.common import ReplicaState

    try:
        status = serve.status()
    except Exception:  # the controller is not back yet
        return False
    a = status.applications.get(app)
    if a is None or a.status != "RUNNING":
        return False
    dep = a.deployments.get(deployment)
    return (
        dep is not None and dep.replica_states.get(ReplicaState.RUNNING, 0) == replicas and len(dep.replica_states) == 1
    )


def _connect(cluster: LocalCluster, timeout_s: float) -> None:
    import ray

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            ray.init(
                address=cluster.address,
                _node_ip_address="127.0.0.1",
                log_to_driver=False,
                logging_level=logging.WARNING,
                configure_logging=False,
            )
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def rehearse(
    *,
    env_name: str,
    storage: Path,
    run: str,
    concurrency: int,
    time_limit_s: float,
    kill_after: int,
    head_down_s: float,
    tail_s: float,
    max_tokens: int,
    new_deployment: bool = True,
    recover_timeout_s: float = 120,
    log: Callable[..., None] = print,
) -> dict[str, Any]:
    """Run the head-kill rehearsal; returns the summary (and ``records`` for the plot)."""
    import ray
    from ray import serve

    from config import load_environment
    from manifests import serve_config

    env = load_environment(env_name)
    app, dep = env.inference.app_name, serve_config.DEPLOYMENT
    redis = Redis.start()
    head_port, worker_port = free_port(), free_port()
    cluster = LocalCluster(
        worker_nodes=1,
        head_cpus=0,
        cpus_per_node=2,
        serve_env=serve_config.ray_env(env),
        worker_proxy_port=worker_port,
        env_extra={"RAY_gcs_rpc_server_reconnect_timeout_s": WORKER_GCS_RECONNECT_TIMEOUT_S},
        head_env={
            "RAY_REDIS_ADDRESS": redis.address,
            "RAY_external_storage_namespace": STORAGE_NAMESPACE,
            **redis.trust_env(),
        },
        head_args_extra=["--redis-password", redis.password],
    )
    log(f"==> redis-server {redis.address} (TLS only); local cluster: head (GCS in Redis) + 1 worker node")
    try:
        cluster.start()

        def config(replicas: int, reload: str | None = None) -> dict[str, Any]:
            cfg = serve_config.local_deploy_config(
                env,
                port=head_port,
                storage=str(storage),
                run_name=run,
                replicas=replicas,
                cpus=0.5,
                reload=reload,
                health_check_period_s=2,
            )
            cfg["proxy_location"] = "EveryNode"  # as serveConfigV2: the worker's proxy takes traffic
            return cfg

        serve_config.deploy(config(2))
        pids_before = replica_pids(cluster)
        keys = redis.keys()
        # Ray ends a driver whose raylet dies; this process drives through the head's.
        ray.shutdown()
        url = f"http://127.0.0.1:{worker_port}/v1/completions"
        loadtest.wait_ready(url, timeout_s=60)
        log(
            f"==> 2 replicas (pids {pids_before}) behind the worker's proxy :{worker_port}; GCS wrote "
            f"{keys} keys to Redis; steady load at concurrency {concurrency} until {tail_s:.0f} s after recovery "
            f"(at most {time_limit_s:.0f} s)"
        )

        stop = threading.Event()
        t0 = time.perf_counter()
        th, result = loadtest.in_background(
            lambda on_count: steady_load(
                url,
                concurrency=concurrency,
                max_tokens=max_tokens,
                stop=stop,
                time_limit_s=time_limit_s,
                on_count=on_count,
            ),
            until=kill_after,
        )
        if not th.is_alive():
            raise RuntimeError(f"the load ended before {kill_after} requests finished; nothing was killed")
        cluster.kill_head()
        kill_t = time.perf_counter() - t0
        log(f"==> t={kill_t:5.1f} s: SIGKILL every process of the head (GCS, raylet, dashboard, controller)")
        time.sleep(head_down_s)
        cluster.restart_head(timeout_s=recover_timeout_s)
        head_up_t = time.perf_counter() - t0
        log(f"==> t={head_up_t:5.1f} s: new head up on the same port, worker node registered again")
        _connect(cluster, recover_timeout_s)
        deadline = time.monotonic() + recover_timeout_s
        while not _serve_whole(app, dep, 2):
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"Serve not whole {recover_timeout_s:.0f} s after the head restart: {serve.status()}"
                )
            time.sleep(0.5)
        whole_t = time.perf_counter() - t0
        pids_after = replica_pids(cluster)
        log(f"==> t={whole_t:5.1f} s: Serve whole again (controller back, 2 replicas RUNNING, pids {pids_after})")
        time.sleep(tail_s)
        stop.set()
        th.join()
        res = result["r"]
        new_deploy_s = None
        if new_deployment:
            # After the load: a new deployment needs the GCS (a new replica actor).
            t = time.perf_counter()
            serve_config.deploy(config(3, reload="after-head-kill"))
            if not _serve_whole(app, dep, 3):
                raise RuntimeError(f"the new deployment did not reach 3 RUNNING replicas: {serve.status()}")
            new_deploy_s = time.perf_counter() - t
            log(f"==> new deployment (3 replicas, new user_config) RUNNING in {new_deploy_s:.1f} s")
        after = loadtest.run(url, requests=20, concurrency=2, time_limit_s=30, max_tokens=max_tokens)
        s: dict[str, Any] = res.summary()
        in_flight = [r for r in res.records if r.retried and r.start_s <= kill_t <= r.start_s + r.latency_s + 1]
        s.update(
            run=run,
            kill_t_s=kill_t,
            head_up_t_s=head_up_t,
            head_down_s=head_up_t - kill_t,
            serve_whole_t_s=whole_t,
            recovery_s=whole_t - kill_t,
            replicas_kept=pids_before == pids_after,
            keys_in_store=keys,
            retried_in_flight_at_kill=len(in_flight),
            new_deployment_s=new_deploy_s,
            after_ok=len(after.ok),
            after_sent=len(after.records),
            concurrency=concurrency,
            max_tokens=max_tokens,
            errors=sorted({r.error for r in res.records if r.error})[:5],
            records=res.records,
        )
        return s
    finally:
        cluster.stop()
        redis.stop()


def main(argv: list[str] | None = None) -> int:
    from rigs.rehearse_serve import add_model_arguments, discover, locate, plot, write_summary

    p = argparse.ArgumentParser(prog="python -m rigs.rehearse_serve_ha", description=__doc__.splitlines()[0])
    add_model_arguments(p, storage_help="checkpoint storage (default: the newest under out/, else a tiny one)")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--time-limit-s", type=float, default=180, help="longest the load runs")
    p.add_argument("--kill-after-requests", type=int, default=500)
    p.add_argument("--head-down-s", type=float, default=10, help="seconds before the new head starts")
    p.add_argument("--tail-s", type=float, default=10, help="seconds the load goes on after Serve is whole again")
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--out", default=str(OUT))
    a = p.parse_args(argv)

    from config import ConfigError
    from manifests.check import load_checked

    try:
        load_checked(a.env)
    except ConfigError as err:
        print(err.render(), file=sys.stderr)
        return 2
    tmp = None
    if a.storage is not None or a.run is not None or discover(ROOT / "out"):
        storage, run = locate(a.storage, a.run)
    else:
        tmp = Path(tempfile.mkdtemp(prefix="ha-ckpt", dir="/tmp"))
        storage, run = tmp, "tiny-run"
        tiny_checkpoint(storage, run)
        print(f"==> no training rehearsal under out/: serving a freshly initialised tiny model ({storage})")
    if run is None:
        print(f"no checkpoint of {'run ' + repr(a.run) if a.run else 'any run'} under {storage}", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        s = rehearse(
            env_name=a.env,
            storage=storage,
            run=run,
            concurrency=a.concurrency,
            time_limit_s=a.time_limit_s,
            kill_after=a.kill_after_requests,
            head_down_s=a.head_down_s,
            tail_s=a.tail_s,
            max_tokens=a.max_tokens,
            log=lambda m: print(m, flush=True),
        )
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    records = s.pop("records")
    plot(
        records,
        s["kill_t_s"],
        s["serve_whole_t_s"],
        out / "latency.png",
        f"rehearse-serve-ha: {s['sent']} requests, concurrency {a.concurrency}, Ray head killed",
        labels=("head SIGKILL", "Serve whole again"),
        extra=((s["head_up_t_s"], "tab:purple", "new head up"),),
    )
    write_summary(out, s)
    print(
        f"  latency p50 {s['p50_ms']:.1f} ms, p99 {s['p99_ms']:.1f} ms; {s['req_per_s']:.1f} req/s over {s['wall_s']:.1f} s"
    )
    print(
        f"  head killed at {s['kill_t_s']:.1f} s, down {s['head_down_s']:.1f} s (new head up at {s['head_up_t_s']:.1f} s); "
        f"Serve whole again at {s['serve_whole_t_s']:.1f} s ({s['recovery_s']:.1f} s after the kill); "
        f"replicas kept their processes: {'yes' if s['replicas_kept'] else 'no'}"
    )
    print(
        f"  new deployment after recovery (3 replicas) RUNNING in {s['new_deployment_s']:.1f} s; "
        f"{s['after_ok']}/{s['after_sent']} requests ok after it"
    )
    print(f"  plot {out / 'latency.png'}, summary {out / 'summary.json'}")
    ok = s["failed"] == 0 and s["after_ok"] == s["after_sent"]
    print(
        "  goal (no failed requests beyond those retried; whole again; new deployments work): "
        + ("met" if ok else "NOT met")
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
