"""A restart's checkpoint verification by N ranks against by one, measured in one run (CPU, gloo,
N processes).

The checkpoint is the job's own: the FSDP2 Llama of ``workloads.training.job`` (``shard_model``,
``make_optimizer``, ``train_step``) after one step, saved by N ranks with
``checkpoint.save_sharded`` (weights and AdamW state, one shard file per rank). Then, alternating
within each repeat, the same N processes find the newest intact checkpoint of the run:

- by one: rank 0 runs ``checkpoint.load_latest_valid(..., keys=[])`` (hashing every file) while
  the other ranks wait at a barrier, as a restart did before;
- by N: every rank runs ``checkpoint.find_latest_valid_sharded`` with the state it would load
  (each rank hashes the shard files its load reads; rank 0 the manifest and meta.json; the
  verdicts are gathered), as ``train_func`` does.

Three figures per N: wall, from a barrier to a barrier (the slowest rank's); CPU, the CPU
seconds of the busiest rank (the time on the critical path where each
rank has a core of its own, as on a GPU node, robust to other load on the machine), both medians of the repeats; and the bytes the busiest
rank hashed (counted at the checkpoint module's hashlib). A control, in the same processes and
alternating with the rest: the same shard files hashed with plain hashlib by rank 0 alone and
split over the N ranks, which is the most the machine's free cores allow the wall figure. Goal: by N
<= 1/N + 20 % of by one. N processes need N free cores to hash in parallel: the cores and the
load average are printed with the result. The files were just written: they are read from the
page cache while memory allows, else from the disk (``--dir /dev/shm`` keeps them in memory, so
the figure is the hashing and the coordination, not the disk's bandwidth).

    python bench/checkpoint_verify.py [--ranks 2,4] [--repeats 5] [--model n_layer=6,n_embd=768,...]
        [--dir /path/on/the/storage/to/measure]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.ranks import launch  # noqa: E402

MODEL = {
    "arch": "llama",
    "n_layer": 6,
    "n_head": 12,
    "n_kv_head": 4,
    "n_embd": 768,
    "ffn_hidden": 2048,
    "block_size": 64,
}
RUN = "verify"


class _CountingSha256:
    """hashlib.sha256 that counts the bytes this process hashes (``bytes_hashed``)."""

    bytes_hashed = 0

    def __init__(self) -> None:
        import hashlib

        self.sha = hashlib.sha256()

    def update(self, data: bytes) -> None:
        _CountingSha256.bytes_hashed += memoryview(data).nbytes
        self.sha.update(data)

    def hexdigest(self) -> str:
        return self.sha.hexdigest()


def worker(rank: int, world: int, port: int, task: dict[str, Any], out: str) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    import pickle
    import types

    import torch
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import get_state_dict

    from workloads.common import checkpoint as ckpt
    from workloads.common.checkpoint import integrity
    from workloads.common.model import build, config_from_dict
    from workloads.training.job import lr_schedule, make_optimizer, train_step
    from workloads.training.parallelize import shard_model

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(0)
    cfg = config_from_dict(task["model"])
    model = shard_model(
        build(cfg), sharding="fsdp", device=torch.device("cpu"), precision="fp32", activation_checkpointing=False
    )
    opt = make_optimizer(model, learning_rate=1e-3, weight_decay=0.1, fused=False)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_schedule(5, 1000))
    x = torch.randint(0, 256, (2, cfg.block_size), generator=torch.Generator().manual_seed(rank))
    train_step(model, opt, sched, x, x, grad_clip=1.0)

    def state() -> dict[str, Any]:
        model_sd, optim_sd = get_state_dict(model, opt)
        return {"model": model_sd, "optim": optim_sd, "progress": pickle.dumps({"step": 1})}

    group = dist.new_group(backend="gloo")
    directory = os.path.join(task["dir"], RUN, ckpt.dir_name(1))
    ckpt.save_sharded(directory, state(), {"step": 1}, process_group=group).result()
    dist.barrier()
    load_state = state()

    def by_one() -> None:
        if rank == 0:
            found = ckpt.load_latest_valid(task["dir"], RUN, keys=[])
            assert found is not None and found.step == 1, found
        dist.barrier()

    def by_all() -> None:
        found = ckpt.find_latest_valid_sharded(task["dir"], RUN, load_state, process_group=group)
        assert found is not None and found.step == 1, found
        dist.barrier()

    shards = sorted(n for n in os.listdir(directory) if n.endswith(".distcp"))

    def raw(names: list[str]) -> None:
        for name in names:
            sha = _CountingSha256()
            with open(os.path.join(directory, name), "rb") as f:
                while chunk := f.read(8 << 20):
                    sha.update(chunk)

    def raw_one() -> None:
        if rank == 0:
            raw(shards)
        dist.barrier()

    def raw_all() -> None:
        raw(shards[rank::world])
        dist.barrier()

    # The checkpoint's verification hashes through its module's ``hashlib``: count what each rank hashes.
    vars(integrity)["hashlib"] = types.SimpleNamespace(sha256=_CountingSha256)
    runs = {"one": by_one, "all": by_all, "raw_one": raw_one, "raw_all": raw_all}
    times: dict[str, list[float]] = {k: [] for k in runs}
    cpu: dict[str, list[float]] = {k: [] for k in runs}  # the busiest rank's CPU seconds
    hashed: dict[str, list[int]] = {}  # bytes each rank hashed, last repeat
    for i in range(task["repeats"]):
        order = list(runs.items())
        for name, fn in order if i % 2 == 0 else order[::-1]:
            dist.barrier()
            t0, c0, b0 = time.perf_counter(), time.process_time(), _CountingSha256.bytes_hashed
            fn()
            times[name].append(time.perf_counter() - t0)
            per_rank: list[tuple[float, int]] = [(0.0, 0)] * world
            dist.all_gather_object(per_rank, (time.process_time() - c0, _CountingSha256.bytes_hashed - b0))
            cpu[name].append(max(c for c, _ in per_rank))
            hashed[name] = [b for _, b in per_rank]
    if rank == 0:
        manifest = json.loads(Path(directory, ckpt.MANIFEST).read_text())
        total = sum(e["size"] for e in manifest["files"].values())
        Path(out).write_text(json.dumps({"times": times, "cpu": cpu, "hashed": hashed, "checkpoint_bytes": total}))
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python bench/checkpoint_verify.py")
    p.add_argument("--ranks", default="2,4", help="comma-separated rank counts, one checkpoint each")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--model", help="overrides of the model shape, e.g. n_layer=8,n_embd=512")
    p.add_argument("--dir", help="where checkpoints are written (default: a temporary directory)")
    p.add_argument("--out", default=str(REPO / "out" / "bench" / "checkpoint_verify.json"))
    args = p.parse_args(argv)
    model = dict(MODEL)
    for pair in filter(None, (args.model or "").split(",")):
        k, v = pair.split("=")
        model[k] = int(v)
    from workloads.common.model import config_from_dict, count_parameters

    params = count_parameters(config_from_dict(model))
    cores = os.cpu_count()
    print(f"==> model {model} ({params / 1e6:.2f}M parameters), {cores} cores, load {os.getloadavg()}", flush=True)
    results: dict[str, Any] = {"parameters": params, "cores": cores, "load_before": os.getloadavg(), "ranks": {}}
    for n in (int(r) for r in args.ranks.split(",")):
        with tempfile.TemporaryDirectory(dir=args.dir) as d:
            r = launch(worker, n, {"model": model, "dir": d, "repeats": args.repeats})
        one, spread = statistics.median(r["times"]["one"]), statistics.median(r["times"]["all"])
        cpu_one, cpu_spread = statistics.median(r["cpu"]["one"]), statistics.median(r["cpu"]["all"])
        ratio, cpu_ratio, goal = spread / one, cpu_spread / cpu_one, 1 / n + 0.2
        mib = r["checkpoint_bytes"] / 2**20
        share = max(r["hashed"]["all"]) / max(r["hashed"]["one"])
        plain_one, plain_all = statistics.median(r["times"]["raw_one"]), statistics.median(r["times"]["raw_all"])
        plain = plain_all / plain_one
        print(
            f"{n} ranks, {mib:.0f} MiB checkpoint: wall: verified by one {one:.3f} s, by {n} {spread:.3f} s: "
            f"{ratio:.3f} of by one (goal <= {goal:.3f} = 1/{n} + 20 %: {'met' if ratio <= goal else 'not met'}); "
            f"CPU of the busiest rank: by one {cpu_one:.3f} s, by {n} {cpu_spread:.3f} s: {cpu_ratio:.3f} "
            f"({'met' if cpu_ratio <= goal else 'not met'}); bytes hashed by the busiest rank: {share:.3f} of by one "
            f"(per rank: {r['hashed']['all']}); control, the shard files hashed with plain hashlib by {n} "
            f"processes vs one: wall {plain_all:.3f} vs {plain_one:.3f} s: {plain:.3f} (what this machine allows); "
            f"medians of {args.repeats}",
            flush=True,
        )
        results["ranks"][str(n)] = {
            "checkpoint_bytes": r["checkpoint_bytes"],
            "by_one_s": round(one, 4),
            "by_all_s": round(spread, 4),
            "ratio": round(ratio, 4),
            "by_one_cpu_s": round(cpu_one, 4),
            "by_all_cpu_s": round(cpu_spread, 4),
            "cpu_ratio": round(cpu_ratio, 4),
            "bytes_share": round(share, 4),
            "plain_hash_ratio": round(plain, 4),
            "goal": round(goal, 4),
            "raw": {"wall": r["times"], "cpu": r["cpu"], "hashed": r["hashed"]},
        }
    results["load_after"] = os.getloadavg()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1))
    print(
        json.dumps(
            {k: v for k, v in results.items() if k != "ranks"}
            | {"ratios": {n: v["ratio"] for n, v in results["ranks"].items()}}
            | {"cpu_ratios": {n: v["cpu_ratio"] for n, v in results["ranks"].items()}}
            | {"plain_hash_ratios": {n: v["plain_hash_ratio"] for n, v in results["ranks"].items()}}
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
