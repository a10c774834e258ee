"""Ray Serve (batching on, then off) vs two single-process FastAPI + uvicorn servers, same tiny
GPT, same requests (16 tokens each), concurrency 1, 8 and 32, all on 127.0.0.1.

    .venv/bin/python bench/serve_bench.py            # writes out/bench/serve_bench.{json,png}
    .venv/bin/python bench/serve_bench.py --only ray --ray-mode proxy   # Ray's defaults instead

Ray Serve runs as the RayService does (``--ray-mode shipped``: inference.high_throughput, HAProxy
ingress and Ray's throughput preset), one replica of 1 CPU unless ``--replicas`` says otherwise.

Every figure and ratio printed is measured in this one run (the machine is shared and noisy).
Servers run one at a time so that idle servers do not take CPU from the measured one.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rigs.serve_local import LocalCluster, free_port  # noqa: E402, I001  (loopback hooks first)
from rigs import loadtest  # noqa: E402
from workloads.common import procfs  # noqa: E402
from workloads.common.procfs import descendants as _descendants  # noqa: E402

Procs = Callable[[], list[tuple[str, int]]]  # (label, pid) of the processes to measure
Results = dict[str, dict[str, Any]]  # name -> concurrency -> summary (and "_ray": the run's settings)

# "Tiny GPT": 2 layers, width 64, context 128 (about 0.1 M parameters).
TINY = {"block_size": 128, "n_layer": 2, "n_head": 4, "n_embd": 64}
RUN = "bench-tiny"
LEVELS = (1, 8, 32)
# Requests per level: enough for a p99, bounded in time.
COUNTS = {1: 150, 8: 400, 32: 800}

# Ray Serve's modes (--ray-mode). "shipped" is what the RayService runs: the config's
# inference.high_throughput, i.e. serve_config.ray_env (HAProxy ingress + throughput preset).
# The others are there to measure what each part does (bench/README.md).
RAY_MODES = {
    "shipped": None,  # serve_config.ray_env(dev config)
    "proxy": {},  # Ray's defaults: the Python proxy actor in front, user code on its own loop
    "haproxy": {"RAY_SERVE_ENABLE_HA_PROXY": "1"},  # HAProxy ingress without the preset
    # The preset with Ray's proxy kept (its direct ingress off).
    "proxy-preset": {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "1", "RAY_SERVE_ENABLE_DIRECT_INGRESS": "0"},
}


def save_checkpoint(storage: Path) -> None:
    import torch

    from workloads.common import checkpoint as ckpt
    from workloads.common.model import GPT, GPTConfig

    torch.manual_seed(0)
    cfg = GPTConfig(**TINY)
    ckpt.save(
        str(storage / RUN / ckpt.dir_name(1)),
        {"model": GPT(cfg).state_dict()},
        {"step": 1, "model_config": cfg.to_dict()},
    )


def _cpu(procs: Procs) -> dict[int, tuple[str, float]]:
    """(label, CPU seconds so far: user + system) per process id."""
    return {pid: (label, procfs.cpu_seconds(pid)) for label, pid in procs()}


def _cpu_per_request(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], n: int
) -> dict[str, float]:
    """CPU ms per request between two ``_cpu`` snapshots, summed per label (the label of the
    first snapshot: a Ray worker's process title names the method it is running at the moment)."""
    out: dict[str, float] = {}
    for pid, (label, t1) in after.items():
        label, t0 = before.get(pid, (label, 0.0))
        out[label] = out.get(label, 0.0) + 1000 * (t1 - t0) / n
    return {k: round(v, 2) for k, v in out.items()}


def measure(
    name: str, url: str, levels: Iterable[int], time_limit_s: float, results: Results, procs: Procs | None = None
) -> None:
    """Each level: throughput and latency, and the CPU time each process spent per request
    (less sensitive to the noisy neighbours than wall-clock figures)."""
    loadtest.wait_ready(url)
    for c in levels:
        loadtest.run(url, requests=2 * c, concurrency=c, time_limit_s=time_limit_s)  # warm-up
        before, client0 = (_cpu(procs) if procs else {}), time.process_time()
        res = loadtest.run(url, requests=COUNTS[c], concurrency=c, time_limit_s=time_limit_s)
        after, client = (_cpu(procs) if procs else {}), time.process_time() - client0
        s = res.summary()
        n = max(1, s["succeeded"])
        s["cpu_ms_per_request"] = _cpu_per_request(before, after, n)
        s["cpu_ms_per_request"]["load client"] = round(1000 * client / n, 2)
        results.setdefault(name, {})[str(c)] = s
        cpu = ", ".join(f"{k} {v:.1f}" for k, v in sorted(s["cpu_ms_per_request"].items(), key=lambda kv: -kv[1]))
        print(
            f"  {name:<22} c={c:<3} {s['req_per_s']:7.1f} req/s  p50 {s['p50_ms']:7.1f} ms  "
            f"p99 {s['p99_ms']:7.1f} ms  ({s['succeeded']}/{s['sent']} ok)\n"
            f"  {'':<22} CPU ms/request: {cpu}",
            flush=True,
        )


def run_fastapi(kind: str, storage: Path, levels: Iterable[int], time_limit_s: float, results: Results) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "bench" / "fastapi_servers.py"),
            kind,
            "--port",
            str(port),
            "--storage",
            str(storage),
            "--run",
            RUN,
            "--max-batch",
            "32",
        ],
        start_new_session=True,
        cwd=str(ROOT),
    )
    try:
        measure(
            f"fastapi-{kind}",
            f"http://127.0.0.1:{port}/v1/completions",
            levels,
            time_limit_s,
            results,
            procs=lambda: [("server", proc.pid)],
        )
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def run_ray(
    storage: Path,
    levels: Iterable[int],
    time_limit_s: float,
    results: Results,
    mode: str,
    wait_s: float,
    replicas: int = 1,
) -> None:
    from config import load_environment
    from manifests import serve_config

    cfg = load_environment("dev")
    preset = RAY_MODES[mode]
    env = serve_config.ray_env(cfg) if preset is None else dict(preset)
    print(f"  ray mode {mode}: {env or 'Ray defaults'}; {replicas} replica(s) of 1 CPU", flush=True)
    port = free_port()
    with LocalCluster(worker_nodes=0, head_cpus=2, serve_env=env) as _cluster:

        def deploy(max_batch: int) -> None:
            conf = serve_config.local_deploy_config(
                cfg, port=port, storage=str(storage), run_name=RUN, replicas=replicas, cpus=1, max_ongoing_requests=64
            )
            conf["applications"][0]["deployments"][0]["user_config"].update(
                max_batch_size=max_batch, batch_wait_timeout_s=wait_s
            )
            conf["logging_config"]["log_level"] = "WARNING"
            serve_config.deploy(conf)

        import httpx

        url = f"http://127.0.0.1:{port}/v1/completions"

        def batches() -> tuple[int, int]:
            """Batches and the requests in them, summed over the replicas (each answers
            /healthz with its own counters and pid; asked until every replica answered)."""
            seen: dict[int, tuple[int, int]] = {}
            for _ in range(50 * replicas):
                h = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).json()
                seen[h["pid"]] = (h["batches"], h["batched_requests"])
                if len(seen) >= replicas:
                    break
            return sum(b for b, _ in seen.values()), sum(r for _, r in seen.values())

        def procs() -> list[tuple[str, int]]:
            """Every process of the cluster, labelled by its Ray process title or program."""
            found = []
            for node in _cluster.nodes:
                for pid in [node.proc.pid, *_descendants(node.proc.pid)]:
                    title = procfs.cmdline(pid)
                    if title.startswith("ray::"):
                        # "ray::ServeController.listen_for_change": the class, not the method
                        label = title.split()[0].removeprefix("ray::").split(":")[0].split(".")[0]
                    else:
                        names = [Path(a).name for a in title.split()]
                        label = next(
                            (
                                n
                                for n in names
                                if n
                                in ("gcs_server", "raylet", "log_monitor.py", "haproxy", "dashboard.py", "agent.py")
                            ),
                            "ray start/other",
                        )
                    found.append((label, pid))
            return found

        deploy(32)
        for c in levels:
            b0, r0 = batches()
            measure("ray-serve-batch", url, [c], time_limit_s, results, procs=procs)
            b1, r1 = batches()
            results["ray-serve-batch"][str(c)]["mean_batch_size"] = (r1 - r0) / max(1, b1 - b0)
            print(f"  {'':<22} mean batch size {(r1 - r0) / max(1, b1 - b0):.1f}", flush=True)
        deploy(1)  # in place (user_config): same replica, batching off
        measure("ray-serve-nobatch", url, [32], time_limit_s, results, procs=procs)


def plot(results: Results, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for name, per in results.items():
        if name.startswith("_"):
            continue
        cs = sorted(int(c) for c in per)
        a.plot(cs, [per[str(c)]["req_per_s"] for c in cs], marker="o", label=name)
        b.plot(cs, [per[str(c)]["p99_ms"] for c in cs], marker="o", label=name)
    for ax, title in ((a, "throughput (req/s)"), (b, "p99 latency (ms)")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(LEVELS), [str(c) for c in LEVELS])
        ax.set_xlabel("concurrency")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    a.legend(fontsize=8)
    fig.suptitle("tiny GPT, 16 tokens per request, 127.0.0.1, one process / one replica")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--time-limit-s", type=float, default=60.0, help="per concurrency level")
    p.add_argument(
        "--ray-mode",
        choices=sorted(RAY_MODES),
        default="shipped",
        help="Ray Serve's ingress/preset: shipped = the RayService's (inference.high_throughput)",
    )
    p.add_argument("--replicas", type=int, default=1, help="Ray Serve replicas (1 CPU each)")
    p.add_argument("--batch-wait-s", type=float, default=0.005)
    p.add_argument("--only", choices=["ray", "fastapi"], default=None)
    p.add_argument("--out", default=str(ROOT / "out" / "bench"))
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    results: Results = {}
    with tempfile.TemporaryDirectory() as d:
        storage = Path(d)
        save_checkpoint(storage)
        print(f"model {TINY}, 16 tokens/request, counts {COUNTS}, limit {a.time_limit_s:.0f} s/level", flush=True)
        if a.only != "ray":
            run_fastapi("plain", storage, LEVELS, a.time_limit_s, results)
            run_fastapi("batched", storage, LEVELS, a.time_limit_s, results)
        if a.only != "fastapi":
            run_ray(storage, LEVELS, a.time_limit_s, results, a.ray_mode, a.batch_wait_s, a.replicas)
    if a.only != "fastapi":
        results["_ray"] = {"mode": a.ray_mode, "replicas": a.replicas, "batch_wait_s": a.batch_wait_s}
    (out / "serve_bench.json").write_text(json.dumps(results, indent=1))
    plot(results, out / "serve_bench.png")

    def r(n: str, c: str = "32") -> float:
        rate: float = results.get(n, {}).get(c, {}).get("req_per_s", float("nan"))
        return rate

    print("\nratios at concurrency 32 (this run):")
    if "ray-serve-batch" in results and "fastapi-plain" in results:
        print(f"  Ray Serve / plain FastAPI        {r('ray-serve-batch') / r('fastapi-plain'):6.3f}x  (goal >= 2)")
        print(f"  Ray Serve / hand-batched FastAPI {r('ray-serve-batch') / r('fastapi-batched'):6.3f}x  (goal >= 0.8)")
    if "ray-serve-nobatch" in results:
        print(f"  @serve.batch on / off            {r('ray-serve-batch') / r('ray-serve-nobatch'):6.3f}x  (goal >= 3)")
    if "fastapi-batched" in results:
        print(f"  hand-batched / plain FastAPI     {r('fastapi-batched') / r('fastapi-plain'):6.3f}x")
    print(f"results: {out / 'serve_bench.json'}, plot: {out / 'serve_bench.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
