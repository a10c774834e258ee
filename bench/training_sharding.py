"""FSDP2 and sharded asynchronous checkpoints, measured in one run (CPU, gloo, N processes).

Every figure is a ratio of two measurements taken in the same run, on the job's own code
(``workloads.training.job``: ``shard_model``, ``make_optimizer``, ``train_step``;
``workloads.common.checkpoint``: ``save_sharded``, ``load_sharded``):

- memory: bytes of model parameters and optimizer state a rank holds after a step, FSDP2 over N
  ranks vs DDP (goal <= 1/N of DDP's + 10 %);
- stall: wall time of S training steps with an asynchronous sharded checkpoint every K steps
  vs none (goal <= 2 %); runs alternate (none, ckpt, ckpt, none, ...) to cancel drift;
- save throughput: a sharded save (staging, every rank writing its shard, fsync, manifest) vs a
  raw parallel write of the same bytes by the same number of writers, each to its own file
  with fsync (goal >= 0.8);
- resharded resume: loading a checkpoint written by N ranks on N/2 ranks vs on N ranks.

    python bench/training_sharding.py [--ranks 4] [--steps 40] [--every 10] [--repeats 2]
        [--model n_layer=4,n_embd=256,...] [--dir /path/on/the/storage/to/measure]
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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import nn
    from torch.distributed.checkpoint.staging import DefaultStager

    from workloads.common.model import GPTConfig, LlamaConfig

    Setup = tuple[nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler, GPTConfig | LlamaConfig]

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.ranks import launch  # noqa: E402

MODEL = {"arch": "llama", "n_layer": 4, "n_head": 8, "n_kv_head": 4, "n_embd": 256, "ffn_hidden": 768, "block_size": 64}
BATCH = 4
# How the stall's saves stage and write (workloads.common.checkpoint.save_sharded).
STALL_MODES = {
    "fresh": "a fresh staging copy per save, written by a thread (the job's)",
    "cached": "staging buffers kept between saves, written by a thread",
    "process": "staging buffers in shared memory, written by DCP's background process",
}


def _setup(rank: int, world: int, port: int, sharding: str, model_config: dict[str, Any]) -> Setup:
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch
    import torch.distributed as dist

    from workloads.common.model import build, config_from_dict
    from workloads.training.job import lr_schedule, make_optimizer
    from workloads.training.parallelize import shard_model

    torch.set_num_threads(1)
    # DCP's background save process (stall mode "process") sets up its group from these.
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(0)
    cfg = config_from_dict(model_config)
    built = build(cfg)
    model: nn.Module
    if sharding == "fsdp":
        model = shard_model(
            built, sharding="fsdp", device=torch.device("cpu"), precision="fp32", activation_checkpointing=False
        )
    else:
        model = torch.nn.parallel.DistributedDataParallel(built)
    opt = make_optimizer(model, learning_rate=1e-3, weight_decay=0.1, fused=False)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_schedule(5, 1000))
    return model, opt, sched, cfg


def _steps(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    sched: torch.optim.lr_scheduler.LRScheduler,
    cfg: GPTConfig | LlamaConfig,
    n: int,
    rank: int,
) -> None:
    import torch

    from workloads.training.job import train_step

    g = torch.Generator().manual_seed(rank)
    for _ in range(n):
        x = torch.randint(0, 256, (BATCH, cfg.block_size), generator=g)
        train_step(model, opt, sched, x, x, grad_clip=1.0)


def _held_bytes(model: nn.Module, opt: torch.optim.Optimizer) -> int:
    """Bytes of parameters and optimizer state this rank holds (its shards under FSDP)."""
    import torch
    from torch.distributed.tensor import DTensor

    def local(t: torch.Tensor) -> torch.Tensor:
        return t.to_local() if isinstance(t, DTensor) else t

    total = sum(local(p).numel() * local(p).element_size() for p in model.parameters())
    for state in opt.state.values():
        for v in state.values():
            if isinstance(v, torch.Tensor) and v.dim() > 0:
                total += local(v).numel() * local(v).element_size()
    return total


def _staging_buffers(*, for_process: bool) -> DefaultStager:
    """A stager that keeps its host copy of the state between saves (pinned on GPUs), refilled
    at each save instead of allocated and faulted in anew; in shared memory for DCP's
    background save process. Each save here starts after the previous one ended."""
    import torch
    from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

    return DefaultStager(
        StagingOptions(
            use_pinned_memory=torch.cuda.is_available(),
            use_shared_memory=for_process,
            use_async_staging=False,
            use_non_blocking_copy=False,
        )
    )


def _cpu_s() -> float:
    """CPU seconds of this process (every thread) and of its live children (DCP's save
    process): what training and checkpointing take from the cores, whatever else runs."""
    import multiprocessing
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    total = r.ru_utime + r.ru_stime
    for child in multiprocessing.active_children():
        try:
            fields = Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            pass
    return total


def _state(model: nn.Module, opt: torch.optim.Optimizer, step: int) -> dict[str, Any]:
    import pickle

    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_sd, optim_sd = get_state_dict(model, opt)
    return {"model": model_sd, "optim": optim_sd, "progress": pickle.dumps({"step": step})}


def worker(rank: int, world: int, port: int, task: dict[str, Any], out: str) -> None:
    import torch.distributed as dist

    from workloads.common import checkpoint as ck

    result: dict[str, Any] = {}
    kind = task["kind"]
    if kind == "memory":
        for sharding in ("ddp", "fsdp"):
            model, opt, sched, cfg = _setup(rank, world, port, sharding, task["model"])
            _steps(model, opt, sched, cfg, 1, rank)
            result[sharding] = _held_bytes(model, opt)
            dist.barrier()
    elif kind == "stall":
        model, opt, sched, cfg = _setup(rank, world, port, "fsdp", task["model"])
        group = dist.new_group(backend="gloo")
        _steps(model, opt, sched, cfg, 3, rank)  # warm-up
        modes = task["modes"]
        stagers = {m: _staging_buffers(for_process=m == "process") for m in modes if m != "fresh"}
        times: dict[str, list[float]] = {"none": [], **{m: [] for m in modes}}
        cpu: dict[str, list[float]] = {m: [] for m in times}
        blocked: dict[str, list[float]] = {m: [] for m in times}
        # Every variant next to a run without checkpoints, in turn (cancels drift).
        order = [m for _ in range(task["repeats"]) for v in modes for m in ("none", v, v, "none")]
        for i, mode in enumerate(order):
            dist.barrier()
            t0, c0, wait = time.perf_counter(), _cpu_s(), 0.0
            pending = None
            for step in range(1, task["steps"] + 1):
                _steps(model, opt, sched, cfg, 1, rank)
                # Saves every K steps, none at the last step: each save has K steps to finish,
                # as in the job's steady state.
                if mode != "none" and step % task["every"] == 0 and step < task["steps"]:
                    w0 = time.perf_counter()
                    if pending is not None:
                        pending.result()
                    path = os.path.join(task["dir"], f"stall{i}", ck.dir_name(step))
                    pending = ck.save_sharded(
                        path,
                        _state(model, opt, step),
                        {"step": step},
                        process_group=group,
                        stager=stagers.get(mode),
                        in_process=mode == "process",
                    )
                    wait += time.perf_counter() - w0
            w0 = time.perf_counter()
            if pending is not None:
                pending.result()
            wait += time.perf_counter() - w0
            times[mode].append(time.perf_counter() - t0)
            cpu[mode].append(_cpu_s() - c0)
            blocked[mode].append(wait)
            dist.barrier()
        result = {"wall": times, "cpu": cpu, "blocked": blocked}
    elif kind == "save":
        model, opt, sched, cfg = _setup(rank, world, port, "fsdp", task["model"])
        _steps(model, opt, sched, cfg, 1, rank)
        group = dist.new_group(backend="gloo")
        saves, raws = [], []
        for i in range(task["repeats"]):
            path = os.path.join(task["dir"], f"save{i}", ck.dir_name(1))
            dist.barrier()
            t0 = time.perf_counter()
            ck.save_sharded(path, _state(model, opt, 1), {"step": 1}, process_group=group).result()
            dist.barrier()
            saves.append(time.perf_counter() - t0)
            mine = os.path.getsize(os.path.join(path, f"__{rank}_0.distcp"))
            payload = os.urandom(mine)
            dist.barrier()
            t0 = time.perf_counter()
            with open(os.path.join(task["dir"], f"raw{i}-{rank}.bin"), "wb") as f:
                f.write(payload)
                f.flush()
                os.fsync(f.fileno())
            dist.barrier()
            raws.append(time.perf_counter() - t0)
        total = sum(p.stat().st_size for p in Path(path).iterdir())
        result = {"save_s": saves, "raw_s": raws, "checkpoint_bytes": total}
        dist.barrier()  # every rank has read the directory before rank 0 moves it
        if rank == 0:
            # Kept for the resume measurement.
            os.replace(path, os.path.join(task["dir"], "resume-from"))
    elif kind == "resume":
        model, opt, sched, cfg = _setup(rank, world, port, "fsdp", task["model"])
        from torch.distributed.checkpoint.state_dict import set_state_dict

        durations = []
        for _ in range(task["repeats"]):
            dist.barrier()
            t0 = time.perf_counter()
            state = _state(model, opt, 0)
            ck.load_sharded(os.path.join(task["dir"], "resume-from"), state)
            set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
            dist.barrier()
            durations.append(time.perf_counter() - t0)
        result = {"load_s": durations}
    if rank == 0:
        Path(out).write_text(json.dumps(result))
    dist.destroy_process_group()


def _model(spec: str | None) -> dict[str, Any]:
    model = dict(MODEL)
    for pair in filter(None, (spec or "").split(",")):
        k, v = pair.split("=")
        model[k] = int(v)
    return model


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python bench/training_sharding.py")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--every", type=int, default=10)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument(
        "--stall-modes",
        default="fresh,cached,process",
        help="save variants the stall is measured for, the job's first: " + ", ".join(STALL_MODES),
    )
    p.add_argument("--model", help="overrides of the model shape, e.g. n_layer=8,n_embd=512")
    p.add_argument("--dir", help="where checkpoints are written (default: a temporary directory)")
    args = p.parse_args(argv)
    model = _model(args.model)
    n = args.ranks
    from workloads.common.model import config_from_dict, count_parameters

    params = count_parameters(config_from_dict(model))
    print(f"==> model {model} ({params / 1e6:.2f}M parameters), {n} ranks (gloo, CPU)", flush=True)
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        base = {"model": model, "dir": d, "repeats": args.repeats}
        mem = launch(worker, n, {**base, "kind": "memory"})
        mem_ratio = mem["fsdp"] / mem["ddp"]
        print(
            f"memory per rank: FSDP2 {mem['fsdp'] / 2**20:.2f} MiB vs DDP {mem['ddp'] / 2**20:.2f} MiB: "
            f"{mem_ratio:.3f} of DDP's (goal <= {1.1 / n:.3f} = 1/{n} + 10 %)",
            flush=True,
        )
        modes = args.stall_modes.split(",")
        stall = launch(worker, n, {**base, "kind": "stall", "steps": args.steps, "every": args.every, "modes": modes})
        med = {k: {m: statistics.median(v) for m, v in stall[k].items()} for k in stall}
        none_s, none_cpu = med["wall"]["none"], med["cpu"]["none"]
        stall_pcts, cpu_pcts, blocked_pcts = {}, {}, {}
        saves = (args.steps - 1) // args.every
        for mode in modes:
            stall_pcts[mode] = 100 * (med["wall"][mode] - none_s) / none_s
            cpu_pcts[mode] = 100 * (med["cpu"][mode] - none_cpu) / none_cpu
            blocked_pcts[mode] = 100 * med["blocked"][mode] / none_s
            print(
                f"stall ({STALL_MODES[mode]}): {args.steps} steps, {saves} async sharded checkpoints "
                f"every {args.every}: wall {med['wall'][mode]:.3f} s vs {none_s:.3f} s without: "
                f"{stall_pcts[mode]:+.2f} % (goal <= 2 %); CPU {cpu_pcts[mode]:+.2f} % of training's "
                f"({none_cpu:.3f} s); training blocked in save/wait {blocked_pcts[mode]:.2f} % "
                f"(medians of {len(stall['wall'][mode])})",
                flush=True,
            )
        stall_pct = stall_pcts[modes[0]]
        save = launch(worker, n, {**base, "kind": "save"})
        save_s, raw_s = statistics.median(save["save_s"]), statistics.median(save["raw_s"])
        gb = save["checkpoint_bytes"]
        print(
            f"save: {gb / 2**20:.1f} MiB by {n} writers: sharded save {save_s:.3f} s ({gb / save_s / 2**20:.0f} MiB/s) "
            f"vs raw parallel write+fsync {raw_s:.3f} s: {raw_s / save_s:.2f} of raw throughput (goal >= 0.8)",
            flush=True,
        )
        same = launch(worker, n, {**base, "kind": "resume"})
        fewer = launch(worker, max(1, n // 2), {**base, "kind": "resume"})
        same_s, fewer_s = statistics.median(same["load_s"]), statistics.median(fewer["load_s"])
        print(
            f"resume: written by {n} ranks, loaded by {n} in {same_s:.3f} s, by {max(1, n // 2)} (resharded) in "
            f"{fewer_s:.3f} s: {fewer_s / same_s:.2f}x",
            flush=True,
        )
    print(
        json.dumps(
            {
                "ranks": n,
                "parameters": params,
                "memory_ratio": round(mem_ratio, 4),
                "memory_goal": round(1.1 / n, 4),
                "stall_pct": round(stall_pct, 2),
                "stall_pct_by_mode": {m: round(v, 2) for m, v in stall_pcts.items()},
                "stall_cpu_pct_by_mode": {m: round(v, 2) for m, v in cpu_pcts.items()},
                "stall_blocked_pct_by_mode": {m: round(v, 2) for m, v in blocked_pcts.items()},
                "save_vs_raw": round(raw_s / save_s, 3),
                "resharded_resume_ratio": round(fewer_s / same_s, 3),
                "raw": {"memory": mem, "stall": stall, "save": save, "resume_same": same, "resume_fewer": fewer},
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
