"""Ray Train throughput vs plain PyTorch DDP, measured in one run (the machine is noisy).

Both sides train the same GPT (workloads.common.model) on the same data with 2 workers on CPU
(gloo), the same steps, the same metrics cadence (an all-reduced loss every `report_every`
steps) and the same checkpoint cadence (the same checkpoint.save, with manifest). The Ray side
is the production `train_func` (ray.train.report every `report_every` steps, asynchronous
checkpoint upload); the DDP side is `torch.distributed` with two processes. Throughput is
tokens/s over the interval where both ran: the two run at the same time, so both see the
same background load on this shared machine (sequential runs were dominated by its noise).

    python bench/training_throughput.py [--steps 200] [--repeats 1]

The bf16 H200 benchmark (tokens/s and MFU) needs a GPU; none was lent to this task, so it is
not measured here (see README).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
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
            json.dump({"first_step": 1, "times": times, "tokens_per_step": BATCH * world * cfg.block_size}, f)
    dist.destroy_process_group()


def _ddp_main(args_json: str) -> None:
    import torch.multiprocessing as mp

    a = json.loads(args_json)
    mp.start_processes(ddp_worker, args=tuple(a), nprocs=2, start_method="spawn")


def run_pair(steps, warmup, report_every, ckpt_every) -> dict:
    """Ray Train and DDP at the same time, each over its own 2 CPUs' worth of processes, so
    both see the same background load; throughput over the interval where both ran."""
    import subprocess
    import threading

    from workloads.common.local_cluster import free_port
    from workloads.training import settings as S
    from workloads.training.job import run

    with tempfile.TemporaryDirectory() as d:
        ray_out, ddp_out = os.path.join(d, "ray.json"), os.path.join(d, "ddp.json")
        s = S.for_local({"model": MODEL, "steps": steps, "batch_size_per_worker": BATCH,
                         "report_every_steps": report_every, "checkpoint_every_steps": ckpt_every or steps,
                         "storage_shared": True, "timing_file": ray_out, "timing_from_step": warmup,
                         "placement_strategy": "PACK", "run_name": "bench"}, storage_path=os.path.join(d, "ckpt"))
        box = {}
        t = threading.Thread(target=lambda: box.setdefault("r", run(s)), daemon=True)
        t.start()
        while not os.path.exists(ray_out + ".go") and t.is_alive():
            time.sleep(0.2)
        ddp_args = [2, free_port(), int(steps * 0.8), warmup, report_every, ckpt_every, os.path.join(d, "ddp"), ddp_out]
        os.makedirs(os.path.join(d, "ddp"))
        ddp = subprocess.run([sys.executable, __file__, "--ddp-child", json.dumps(ddp_args)], env={**os.environ, "PYTHONPATH": str(REPO)})
        t.join()
        if box["r"].error or ddp.returncode:
            raise RuntimeError(f"run failed: ray={box['r'].error} ddp rc={ddp.returncode}")
        ray_t, ddp_t = json.loads(Path(ray_out).read_text()), json.loads(Path(ddp_out).read_text())
    # Skip DDP's first `warmup` steps; the common interval of both runs.
    a = max(ray_t["times"][0], ddp_t["times"][warmup])
    b = min(ray_t["times"][-1], ddp_t["times"][-1])
    tps = lambda t: t["tokens_per_step"] * sum(1 for x in t["times"] if a < x <= b) / (b - a)
    return {"ray": tps(ray_t), "ddp": tps(ddp_t), "overlap_s": b - a,
            "ray_stall_pct": _stall_pct(ray_t, ckpt_every)}


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


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=250)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset of: " + ", ".join(CONFIGS))
    p.add_argument("--out", default=str(REPO / "out" / "bench" / "training_throughput.json"))
    p.add_argument("--ddp-child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.ddp_child:
        _ddp_main(args.ddp_child)
        return 0

    import ray

    from workloads.common.local_cluster import LocalCluster

    print("bf16 on an H200: NOT MEASURED (no GPU machine was lent to this task)", flush=True)
    cluster = LocalCluster(worker_nodes=1, cpus_per_node=2, dashboard=False)
    print("Ray Train and DDP run at the same time (same background load); ratios over the interval both ran",
          flush=True)
    rows = []
    try:
        cluster.start()
        os.environ["RAY_ADDRESS"] = cluster.address
        ray.init(address=cluster.address, logging_level=logging.WARNING, log_to_driver=False)
        for name in args.configs.split(","):
            report_every, ckpt_every = CONFIGS[name]
            for r in range(args.repeats):
                m = run_pair(args.steps, args.warmup, report_every, ckpt_every)
                rows.append({"config": name, "repeat": r, "ddp_tokens_per_s": m["ddp"], "ray_tokens_per_s": m["ray"],
                             "ratio": m["ray"] / m["ddp"], "overlap_s": m["overlap_s"],
                             "ray_checkpoint_stall_pct": m["ray_stall_pct"]})
                stall = "" if m["ray_stall_pct"] is None else f"   checkpoint stall {m['ray_stall_pct']:.1f} %"
                print(f"{name:42s} DDP {m['ddp']:7.0f} tok/s  Ray Train {m['ray']:7.0f} tok/s  ratio "
                      f"{m['ray'] / m['ddp']:.3f}  (over {m['overlap_s']:.0f} s){stall}", flush=True)
    finally:
        ray.shutdown()
        cluster.stop()
    by = {}
    for row in rows:
        by.setdefault(row["config"], []).append(row)
    summary = {name: {"ratio": sorted(r["ratio"] for r in rs)[len(rs) // 2],
                      "ray_tokens_per_s": sorted(r["ray_tokens_per_s"] for r in rs)[len(rs) // 2]}
               for name, rs in by.items()}
    stalls = sorted(r["ray_checkpoint_stall_pct"] for r in rows if r["ray_checkpoint_stall_pct"] is not None)
    if stalls:
        summary["ray_checkpoint_stall_pct"] = stalls[len(stalls) // 2]
        print(f"Ray Train step-time stall from checkpoints every 50 steps (extra time of the steps after a "
              f"checkpoint, same run): {summary['ray_checkpoint_stall_pct']:.1f} % (goal <= 5 %)")
    print("median ratio Ray/DDP per config (goal >= 0.97): " +
          ", ".join(f"{k}: {v['ratio']:.3f}" for k, v in summary.items() if isinstance(v, dict)))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"rows": rows, "summary": summary, "steps": args.steps,
                                          "model": MODEL, "batch_per_worker": BATCH}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
