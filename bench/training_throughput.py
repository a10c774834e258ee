"""Ray Train throughput vs plain PyTorch DDP, measured in one run.

Both sides train the same GPT (workloads.common.model) on the same data with 2 workers on CPU
(gloo), the same steps, the same metrics cadence (an all-reduced loss every `report_every`
steps) and the same checkpoint cadence (the same checkpoint.save, with manifest, then a
barrier). The Ray side is the production `train_func` (ray.train.report every `report_every`
steps, asynchronous checkpoint upload) on a fresh local cluster (head with 0 CPUs, one worker
node with 2 CPUs), stopped after each run; the DDP side is `torch.distributed` with two
processes and no Ray process running.

The runs are sequential and interleaved (DDP, Ray, then Ray, DDP, ...; `--repeats` pairs per
config, medians). An earlier version ran both at the same time so that they shared the
machine's background noise; on a quiet machine that is the wrong comparison: four training
processes on two cores, and every CPU-second Ray's own processes use is taken from both sides
alike instead of from Ray alone. Measured on the same quiet machine (2026-12-02): concurrent
0.79 ("no reports"), sequential 0.93-0.95 (see bench/README.md, "Training").

Besides tokens/s it prints, per Ray run, the CPU milliseconds per step of rank 0 on each side
and of every other Ray process (from /proc, split by head node, worker node and driver), and
the time spent inside `ray.train.report()`: CPU seconds are far less noisy than wall-clock
figures on a shared machine and say where Ray's overhead goes.

    python bench/training_throughput.py [--steps 150] [--repeats 3] [--configs ...]
        [--ray-env RAY_TRAIN_HEALTH_CHECK_INTERVAL_S=2 ...]

Ray runs with workloads.training.settings.LOCAL_RAY_ENV (a 0.5 s Train controller poll: with
Ray's 2 s default, reports every 10 steps here come faster than the controller takes them and
report() paces training; see there), plus any --ray-env.

The bf16 H200 benchmark (tokens/s and MFU) needs a GPU; none was lent to this task, so it is
not measured here (see README).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MODEL = {"n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 128}
BATCH = 8
CONFIGS = {  # name: (report_every, checkpoint_every or None)
    "no reports": (10**9, None),
    "metrics every 10": (10, None),
    "metrics every 10 + checkpoint every 50": (10, 50),
}


def ddp_worker(rank: int, world: int, port: int, steps: int, warmup: int, report_every: int,
               ckpt_every: int | None, storage: str, out: str) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"  # as Ray sets it for a 1-CPU worker
    # Ray workers call setsid, so with the kernel's autogroup scheduling each gets its own CPU
    # share; give each DDP rank its own session too, or the two ranks would share one share.
    os.setsid()
    import torch
    import torch.distributed as dist

    from workloads.common import checkpoint as ckpt
    from workloads.common.model import GPT, GPTConfig
    from workloads.training.data import ByteWindows, DataPosition, load_corpus
    from workloads.training.job import _lr_lambda, _rng_state

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(1234)
    cfg = GPTConfig(**MODEL)
    model = torch.nn.parallel.DistributedDataParallel(GPT(cfg))
    data = ByteWindows(load_corpus(None, 4 << 20), cfg.block_size, 1234)
    pos = DataPosition()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-3, betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _lr_lambda(20, steps))
    window, n = 0.0, 0
    times: list[float] = []
    cpu_at_go = None
    for step in range(steps):
        x, y = data.next_batch(pos, rank=rank, world_size=world, batch_size=BATCH)
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        done = step + 1
        window += loss.item()
        n += 1
        times.append(time.time())
        if done == warmup:
            cpu_at_go = time.process_time()
        want_ckpt = (ckpt_every and done % ckpt_every == 0) or done == steps
        if want_ckpt or done % report_every == 0:
            mean = torch.tensor([window / n])
            dist.all_reduce(mean)
            window, n = 0.0, 0
        if want_ckpt:
            states = [None] * world
            dist.all_gather_object(states, _rng_state())
            if rank == 0:
                ckpt.save(os.path.join(storage, ckpt.dir_name(done)),
                          {"model": model.module.state_dict(), "optimizer": opt.state_dict(),
                           "scheduler": sched.state_dict(), "rng": states},
                          meta={"step": done, "data_position": pos.to_dict()})
            dist.barrier()
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"first_step": 1, "times": times, "tokens_per_step": BATCH * world * cfg.block_size,
                       "cpu_s": time.process_time() - cpu_at_go}, f)
    dist.destroy_process_group()


def _ddp_main(args_json: str) -> None:
    import torch.multiprocessing as mp

    a = json.loads(args_json)
    mp.start_processes(ddp_worker, args=tuple(a), nprocs=2, start_method="spawn")


def _tokens_per_s(t: dict, warmup: int) -> float:
    """Steady-state throughput: from the end of step `warmup` to the end of the last step."""
    times = t["times"][warmup - t["first_step"]:]
    return t["tokens_per_step"] * (len(times) - 1) / (times[-1] - times[0])


def _cpu_seconds(pids: list[int]) -> dict[int, tuple[str, float]]:
    """CPU seconds (user + system) used so far by each of ``pids``, with a short name."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        out[pid] = (_short_name(cmd), (int(fields[11]) + int(fields[12])) / tick)
    return out


def _short_name(cmd: list[bytes]) -> str:
    first = cmd[0].decode(errors="replace")
    if first.startswith("ray::"):  # actors and Ray's own agents
        name = first[5:].split(".")[0].split(":")[0]
        return {"RayTrainWorker": "train workers"}.get(name, name)
    words = [c.decode(errors="replace") for c in cmd if c]
    for w in words:
        base = os.path.basename(w)
        if base in ("gcs_server", "raylet"):
            return base
        if base.endswith(".py") and base not in ("setup_worker.py",):
            return base[:-3]
        if w in ("ray.util.client.server",):
            return "client server"
    return os.path.basename(words[0]) if words else "?"


def ray_run(steps: int, warmup: int, report_every: int, ckpt_every: int | None, ray_env: dict) -> dict:
    """One Ray Train run on its own fresh local cluster (head with 0 CPUs for the controller, one
    worker node with 2 CPUs for the 2 workers), stopped afterwards so that no Ray process is
    left running during the DDP runs. CPU seconds of every Ray process over the measured
    steps come from /proc."""
    import ray

    from workloads.common.local_cluster import LocalCluster, _descendants
    from workloads.training import settings as S
    from workloads.training.job import run

    cluster = LocalCluster(worker_nodes=1, cpus_per_node=2, dashboard=False, env_extra=ray_env)
    saved_env = {k: os.environ.get(k) for k in ray_env}
    os.environ.update(ray_env)  # the driver too (Train reads some settings where trainer.fit runs)
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "ray.json")
        s = S.for_local({"model": MODEL, "steps": steps, "batch_size_per_worker": BATCH,
                         "report_every_steps": report_every, "checkpoint_every_steps": ckpt_every or steps,
                         "storage_shared": True, "timing_file": out, "timing_from_step": warmup,
                         "placement_strategy": "PACK", "run_name": "bench"}, storage_path=os.path.join(d, "ckpt"))
        try:
            cluster.start()
            os.environ["RAY_ADDRESS"] = cluster.address
            ray.init(address=cluster.address, logging_level=logging.WARNING, log_to_driver=False)
            pids = lambda: [os.getpid()] + [p for n in cluster.nodes for p in [n.proc.pid, *_descendants(n.proc.pid)]]
            box = {}
            t = threading.Thread(target=lambda: box.setdefault("r", run(s)), daemon=True)
            t.start()
            while not os.path.exists(out + ".go") and t.is_alive():
                time.sleep(0.05)
            cpu0 = _cpu_seconds(pids())
            while not os.path.exists(out) and t.is_alive():
                time.sleep(0.05)
            cpu1 = _cpu_seconds(pids())
            head_pids = set(_descendants(cluster.nodes[0].proc.pid))
            t.join()
            if box["r"].error:
                raise RuntimeError(f"Ray Train run failed: {box['r'].error}")
            timing = json.loads(Path(out).read_text())
        finally:
            ray.shutdown()
            cluster.stop()
            for k, v in saved_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    head_side = {pid for pid in cpu1 if pid == cluster.nodes[0].proc.pid or pid in head_pids}
    by_name: dict[str, float] = {}
    by_node = {"head node": 0.0, "worker node": 0.0, "driver": 0.0}
    for pid, (name, c1) in cpu1.items():
        c0 = cpu0.get(pid, (name, 0.0))[1]
        node = "driver" if pid == os.getpid() else "head node" if pid in head_side else "worker node"
        if name != "train workers":
            by_node[node] += c1 - c0
        key = "driver (trainer.fit)" if pid == os.getpid() else name
        by_name[key] = by_name.get(key, 0.0) + c1 - c0
    n_steps = len(timing["times"]) - (warmup - timing["first_step"]) - 1
    return {"tokens_per_s": _tokens_per_s(timing, warmup), "timing": timing, "steps_measured": n_steps,
            "cpu_s_by_process": by_name, "cpu_s_by_node": by_node, "report_s": timing["report_s"], "reports": timing["reports"]}


def ddp_run(steps: int, warmup: int, report_every: int, ckpt_every: int | None) -> dict:
    from workloads.common.local_cluster import free_port

    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "ddp.json")
        os.makedirs(os.path.join(d, "ddp"))
        args = [2, free_port(), steps, warmup, report_every, ckpt_every, os.path.join(d, "ddp"), out]
        proc = subprocess.run([sys.executable, __file__, "--ddp-child", json.dumps(args)],
                              env={**os.environ, "PYTHONPATH": str(REPO)})
        if proc.returncode:
            raise RuntimeError(f"DDP run failed: rc={proc.returncode}")
        timing = json.loads(Path(out).read_text())
    return {"tokens_per_s": _tokens_per_s(timing, warmup), "timing": timing}


def _stall_pct(t: dict, ckpt_every: int | None) -> float | None:
    """Extra wall time of the steps right after a checkpoint, as % of the run (same run)."""
    if not ckpt_every:
        return None
    first, times = t["first_step"], t["times"]
    dts = {first + i: times[i] - times[i - 1] for i in range(1, len(times))}  # step -> its duration
    after_ckpt = {k for k in dts if (k - 1) % ckpt_every == 0}
    normal = sorted(v for k, v in dts.items() if k not in after_ckpt)
    median = normal[len(normal) // 2]
    extra = sum(max(0.0, dts[k] - median) for k in after_ckpt)
    return 100 * extra / sum(dts.values())


def _env_pairs(pairs: list[str]) -> dict:
    out = {}
    for pair in pairs:
        k, sep, v = pair.partition("=")
        if not sep or not k:
            raise SystemExit(f"--ray-env {pair!r}: expected NAME=VALUE, e.g. RAY_TRAIN_HEALTH_CHECK_INTERVAL_S=1")
        out[k] = v
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3, help="DDP/Ray pairs per config (medians reported)")
    p.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset of: " + ", ".join(CONFIGS))
    p.add_argument("--ray-env", action="append", default=[], metavar="NAME=VALUE",
                   help="environment of every Ray process (and the driver), on top of "
                        "workloads.training.settings.LOCAL_RAY_ENV, e.g. RAY_TRAIN_HEALTH_CHECK_INTERVAL_S=2")
    p.add_argument("--out", default=str(REPO / "out" / "bench" / "training_throughput.json"))
    p.add_argument("--ddp-child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.ddp_child:
        _ddp_main(args.ddp_child)
        return 0
    from workloads.training.settings import LOCAL_RAY_ENV

    # The local settings first (the controller's poll: see LOCAL_RAY_ENV), then --ray-env;
    # --ray-env RAY_TRAIN_HEALTH_CHECK_INTERVAL_S=2 measures with Ray's default.
    ray_env = {**LOCAL_RAY_ENV, **_env_pairs(args.ray_env)}

    print("bf16 on an H200: NOT MEASURED (no GPU machine was lent to this task)", flush=True)
    print(f"one at a time, interleaved (DDP, Ray, Ray, DDP, ...), {args.repeats} pair(s) per config, "
          f"{args.steps} steps, tokens/s from step {args.warmup} to the last; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; Ray env {ray_env or 'defaults'}", flush=True)
    rows = []
    for name in args.configs.split(","):
        report_every, ckpt_every = CONFIGS[name]
        for r in range(args.repeats):
            order = ("ddp", "ray") if r % 2 == 0 else ("ray", "ddp")  # cancels slow drifts
            m = {}
            for side in order:
                m[side] = (ddp_run(args.steps, args.warmup, report_every, ckpt_every) if side == "ddp" else
                           ray_run(args.steps, args.warmup, report_every, ckpt_every, ray_env))
            ray_m, ddp_m = m["ray"], m["ddp"]
            n = ray_m["steps_measured"]
            cpu = ray_m["cpu_s_by_process"]
            others = {k: v for k, v in cpu.items() if k != "train workers"}
            row = {"config": name, "repeat": r, "order": order, "ddp_tokens_per_s": ddp_m["tokens_per_s"],
                   "ray_tokens_per_s": ray_m["tokens_per_s"], "ratio": ray_m["tokens_per_s"] / ddp_m["tokens_per_s"],
                   "ddp_rank0_cpu_ms_per_step": 1000 * ddp_m["timing"]["cpu_s"] / n,
                   "ray_rank0_cpu_ms_per_step": 1000 * ray_m["timing"]["cpu_s"] / n,
                   "ray_other_cpu_ms_per_step": {k: 1000 * v / n for k, v in sorted(others.items(), key=lambda kv: -kv[1])},
                   "ray_other_cpu_ms_per_step_by_node": {k: 1000 * v / n for k, v in ray_m["cpu_s_by_node"].items()},
                   "ray_report_ms_mean": 1000 * ray_m["report_s"] / max(1, ray_m["reports"]),
                   "ray_reports": ray_m["reports"], "ray_report_s_total": ray_m["report_s"],
                   "ddp_checkpoint_stall_pct": _stall_pct(ddp_m["timing"], ckpt_every),
                   "ray_checkpoint_stall_pct": _stall_pct(ray_m["timing"], ckpt_every),
                   "load_average": os.getloadavg()}
            rows.append(row)
            top = ", ".join(f"{k} {v:.1f}" for k, v in list(row["ray_other_cpu_ms_per_step"].items())[:5])
            print(f"{name:40s} DDP {row['ddp_tokens_per_s']:6.0f} tok/s  Ray {row['ray_tokens_per_s']:6.0f} tok/s  "
                  f"ratio {row['ratio']:.3f}  | CPU ms/step rank 0: DDP {row['ddp_rank0_cpu_ms_per_step']:.1f} "
                  f"Ray {row['ray_rank0_cpu_ms_per_step']:.1f}; Ray's other processes {sum(others.values()) * 1000 / n:.1f} "
                  f"(" + ", ".join(f"{k} {v:.1f}" for k, v in row["ray_other_cpu_ms_per_step_by_node"].items()) + f"; {top}) | in report(): {row['ray_report_ms_mean']:.1f} ms x {row['ray_reports']}"
                  f" | load {row['load_average'][0]:.2f}", flush=True)
    summary = {}
    for name in dict.fromkeys(r["config"] for r in rows):
        rs = [r for r in rows if r["config"] == name]
        summary[name] = {"ratio": statistics.median(r["ratio"] for r in rs),
                         "ddp_tokens_per_s": statistics.median(r["ddp_tokens_per_s"] for r in rs),
                         "ray_tokens_per_s": statistics.median(r["ray_tokens_per_s"] for r in rs)}
        stall = [r["ray_checkpoint_stall_pct"] for r in rs if r["ray_checkpoint_stall_pct"] is not None]
        if stall:
            summary[name]["ray_checkpoint_stall_pct"] = statistics.median(stall)
            summary[name]["ddp_checkpoint_stall_pct"] = statistics.median(r["ddp_checkpoint_stall_pct"] for r in rs)
    print("median Ray/DDP ratio per config (goal >= 0.97): " +
          ", ".join(f"{k}: {v['ratio']:.3f}" for k, v in summary.items()))
    for k, v in summary.items():
        if "ray_checkpoint_stall_pct" in v:
            print(f"step-time stall from checkpoints ({k}; extra time of the steps right after a checkpoint, "
                  f"same run): Ray {v['ray_checkpoint_stall_pct']:.1f} %, DDP {v['ddp_checkpoint_stall_pct']:.1f} % (goal <= 5 %)")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"rows": rows, "summary": summary, "steps": args.steps,
                                          "warmup": args.warmup, "ray_env": ray_env,
                                          "model": MODEL, "batch_per_worker": BATCH}, indent=2))
    return 0


if __name__ == "__main__":
    import signal

    # `timeout` sends SIGTERM: exit through the finally blocks, so the local cluster is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main())
