"""Local rehearsal of the generation service under load and a replica failure (real Ray).

    python -m rigs.rehearse_serve [--storage DIR] [--run NAME] [--export DIR]

Deploys the app (the same serveConfigV2 as the cluster's, CPU-sized) on a local head + two
worker nodes, serving the newest intact checkpoint a training rehearsal wrote (or, with ``--export``, a Hugging
Face export of one: ``python -m workloads.export ... --tokenizer bytes``); runs a bounded
load test against 127.0.0.1 (fixed request count and time limit), SIGKILLs one replica's process
mid-load, and reports requests sent / succeeded / failed, requests retried by the client
(reported apart), p50/p99 latency and tokens/s, with a latency-over-time plot marking the kill
and the replica's replacement.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from rigs import loadtest
from rigs.serve_local import LocalCluster, free_port, replica_pids  # loopback hooks first

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "out" / "rehearse-serve"


def discover(root: Path) -> tuple[Path, str] | None:
    """(storage, run) of the newest checkpoint any rehearsal wrote under ``root`` (``out/``)."""
    from workloads.common import checkpoint as ckpt

    found = [d for d in root.rglob("checkpoint_*") if d.is_dir() and ckpt.DIR_RE.match(d.name)] if root.is_dir() else []
    if not found:
        return None
    newest = max(found, key=lambda d: d.stat().st_mtime)
    return newest.parent.parent, newest.parent.name


def find_run(storage: Path, run: str | None) -> str | None:
    from workloads.common import checkpoint as ckpt

    if run:
        return run if ckpt.list_checkpoints(str(storage), run) else None
    runs = (
        [d for d in storage.iterdir() if d.is_dir() and ckpt.list_checkpoints(str(storage), d.name)]
        if storage.is_dir()
        else []
    )
    return max(runs, key=lambda d: d.stat().st_mtime).name if runs else None


def locate(storage: str | None, run: str | None) -> tuple[Path, str | None]:
    """(storage, run) to serve: ``storage`` or else the newest rehearsal's under out/; ``run`` if
    it has a checkpoint there, or else that storage's newest run. Run None: nothing to serve."""
    if storage is not None:
        where = Path(storage).resolve()
        return where, find_run(where, run)
    hit = discover(ROOT / "out")
    if hit is None:
        return ROOT / "out", None
    return hit[0], find_run(hit[0], run) if run else hit[1]


def write_summary(out: Path, s: dict[str, Any]) -> None:
    """``out/summary.json``, and the summary's first lines: the requests and the client's retries."""
    (out / "summary.json").write_text(json.dumps(s, indent=1))
    print("\n==> summary")
    print(f"  requests sent {s['sent']}, succeeded {s['succeeded']}, failed {s['failed']}")
    print(
        f"  retried by the client {s['retried']} (succeeded on retry {s['retried_ok']}; "
        f"{s['retried_in_flight_at_kill']} were in flight at the kill)"
    )


def plot(
    records: list[loadtest.Record],
    kill_t: float,
    replaced_t: float | None,
    path: Path,
    title: str,
    *,
    labels: tuple[str, str] = ("replica SIGKILL", "replacement replica running"),
    extra: tuple[tuple[float, str, str], ...] = (),
) -> None:
    """Latency over time; ``extra``: more (time, colour, label) marks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.5))
    groups = {
        "ok": [r for r in records if r.status == 200 and not r.retried],
        "ok after a retry": [r for r in records if r.status == 200 and r.retried],
        "failed": [r for r in records if r.status != 200],
    }
    style = {"ok": ("tab:blue", "."), "ok after a retry": ("tab:orange", "o"), "failed": ("tab:red", "x")}
    for name, rs in groups.items():
        if rs:
            c, m = style[name]
            ax.scatter(
                [r.start_s for r in rs],
                [1000 * r.latency_s for r in rs],
                s=10 if m == "." else 30,
                c=c,
                marker=m,
                label=f"{name} ({len(rs)})",
            )
    ax.axvline(kill_t, color="red", ls="--", label=labels[0])
    for t, colour, label in extra:
        ax.axvline(t, color=colour, ls="--", label=label)
    if replaced_t is not None:
        ax.axvline(replaced_t, color="green", ls="--", label=labels[1])
    ax.set_xlabel("request start (s since load began)")
    ax.set_ylabel("latency (ms)")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def add_model_arguments(p: argparse.ArgumentParser, *, storage_help: str) -> None:
    """--storage, --run, --env: which trained model a serving rehearsal serves, and how."""
    p.add_argument("--storage", default=None, help=storage_help)
    p.add_argument("--run", default=None, help="run name (default: the newest run under --storage)")
    p.add_argument("--env", default="dev", help="environment whose inference settings are rehearsed")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rigs.rehearse_serve", description=__doc__.splitlines()[0])
    add_model_arguments(p, storage_help="checkpoint storage of the training rehearsal (default: the newest under out/)")
    p.add_argument("--requests", type=int, default=600)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--time-limit-s", type=float, default=120)
    # Kill after a share of the requests, not after a fixed time: mid-load however fast it runs.
    p.add_argument(
        "--kill-after-requests",
        type=int,
        default=None,
        help="SIGKILL a replica once this many requests finished (default: a third)",
    )
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--out", default=str(OUT))
    p.add_argument("--export", default=None, help="serve this Hugging Face export (python -m workloads.export) instead")
    a = p.parse_args(argv)

    from config import ConfigError
    from manifests.check import load_checked

    try:
        env = load_checked(a.env)
    except ConfigError as err:
        print(err.render(), file=sys.stderr)
        return 2
    storage, run = locate(a.storage, a.run)
    if a.export is not None:
        from workloads.common import hf_llama

        try:
            hf_llama.verify_export(a.export)
        except hf_llama.HFFormatError as err:
            print(f"--export {a.export}: {err}", file=sys.stderr)
            return 2
        storage, run = Path(a.export), run or "export"
    if run is None:
        print(
            f"no checkpoint of {'run ' + repr(a.run) if a.run else 'any run'} under {storage}: run the "
            "training rehearsal first (`make rehearse-train`, or `make rehearse` for both)",
            file=sys.stderr,
        )
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)

    from ray import serve
    from ray.serve._private.common import ReplicaState

    from manifests import serve_config

    print(f"==> local cluster: head + 2 worker nodes; serving run {run!r} from {storage}", flush=True)
    port = free_port()
    with LocalCluster(worker_nodes=2, head_cpus=0, cpus_per_node=1, serve_env=serve_config.ray_env(env)) as cluster:
        serve_config.deploy(
            serve_config.local_deploy_config(
                env,
                port=port,
                storage=str(storage),
                run_name=run,
                replicas=2,
                cpus=1,
                health_check_period_s=2,
                export_path=a.export,
            )
        )
        url = f"http://127.0.0.1:{port}"
        import httpx

        info = httpx.get(f"{url}/v1/models", timeout=10).json()["data"][0]
        print(
            f"==> serving {info['id']} ({info['checkpoint']}); skipped: {info['skipped_checkpoints'] or 'none'}",
            flush=True,
        )
        pids = replica_pids(cluster)
        print(
            f"==> replicas running, pids {pids}; load: {a.requests} requests, concurrency "
            f"{a.concurrency}, limit {a.time_limit_s:.0f} s, {a.max_tokens} tokens each",
            flush=True,
        )

        t_start = time.perf_counter()
        kill_at = a.kill_after_requests if a.kill_after_requests is not None else a.requests // 3
        th, result = loadtest.in_background(
            lambda on_count: loadtest.run(
                f"{url}/v1/completions",
                requests=a.requests,
                concurrency=a.concurrency,
                time_limit_s=a.time_limit_s,
                max_tokens=a.max_tokens,
                retry=True,
                on_record=on_count,
            ),
            until=kill_at,
        )
        if not th.is_alive():
            print(f"the load ended before {kill_at} requests finished; nothing was killed", file=sys.stderr)
            return 1
        victim = pids[0]
        os.kill(victim, signal.SIGKILL)
        kill_t = time.perf_counter() - t_start
        print(f"==> t={kill_t:5.1f} s: SIGKILL replica pid {victim}", flush=True)
        replaced_t = None
        while th.is_alive():
            th.join(1.0)
            if replaced_t is None:
                now = replica_pids(cluster)
                dep = serve.status().applications[env.inference.app_name].deployments[serve_config.DEPLOYMENT]
                if len(now) == 2 and victim not in now and dep.replica_states.get(ReplicaState.RUNNING, 0) == 2:
                    replaced_t = time.perf_counter() - t_start
                    print(f"==> t={replaced_t:5.1f} s: replacement replica running (pids {now})", flush=True)
            print(f"    t={time.perf_counter() - t_start:5.1f} s ...", flush=True)
        deadline = time.monotonic() + 90
        while replaced_t is None and time.monotonic() < deadline:
            now = replica_pids(cluster)
            dep = serve.status().applications[env.inference.app_name].deployments[serve_config.DEPLOYMENT]
            if len(now) == 2 and victim not in now and dep.replica_states.get(ReplicaState.RUNNING, 0) == 2:
                replaced_t = time.perf_counter() - t_start
                print(f"==> t={replaced_t:5.1f} s: replacement replica running (pids {now})", flush=True)
            time.sleep(0.5)
        res = result["r"]
        s = res.summary()
        in_flight = [r for r in res.records if r.retried and r.start_s <= kill_t <= r.start_s + r.latency_s + 1]
        s.update(
            run=run,
            model=info["id"],
            kill_t_s=kill_t,
            replacement_running_t_s=replaced_t,
            retried_in_flight_at_kill=len(in_flight),
            concurrency=a.concurrency,
            max_tokens=a.max_tokens,
            errors=sorted({r.error for r in res.records if r.error})[:5],
        )
        plot(
            res.records,
            kill_t,
            replaced_t,
            out / "latency.png",
            f"rehearse-serve: {s['sent']} requests, concurrency {a.concurrency}, one replica killed",
        )
    write_summary(out, s)
    print(
        f"  latency p50 {s['p50_ms']:.1f} ms, p99 {s['p99_ms']:.1f} ms; {s['req_per_s']:.1f} req/s, "
        f"{s['tokens_per_s']:.0f} tokens/s over {s['wall_s']:.1f} s"
    )
    print(
        f"  kill at {kill_t:.1f} s, replacement replica running at "
        f"{f'{replaced_t:.1f} s ({replaced_t - kill_t:.1f} s after the kill)' if replaced_t else 'not within 90 s'}"
    )
    print(f"  plot {out / 'latency.png'}, summary {out / 'summary.json'}")
    ok = s["failed"] == 0
    print("  goal (no failed requests beyond those retried): " + ("met" if ok else "NOT met"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
