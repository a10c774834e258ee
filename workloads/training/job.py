"""The Ray Train job: a GPT on byte tokens with exact, fault-tolerant resume.

``train_func`` is the per-worker loop (it builds its own model and data); ``run`` wraps it in a
``TorchTrainer`` with the scaling, failure and checkpoint settings from ``JobSettings``.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
import random
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

log = logging.getLogger("workloads.training")

# What drives recovery after a node loss (measured in bench/training_recovery.py, see
# bench/README.md): Ray Train's controller polls the workers every
# RAY_TRAIN_HEALTH_CHECK_INTERVAL_S (2 s; a killed worker fails its next poll), then new worker
# processes start and restore the state. The same poll also paces report(): see ReportPacing.


@dataclass
class JobSettings:
    """Everything ``train_func`` needs, JSON-serializable (it travels as train_loop_config)."""

    run_name: str
    storage_path: str  # POSIX path or s3://bucket/prefix
    steps: int
    num_workers: int
    gpus_per_worker: int = 0
    cpus_per_worker: float = 1.0
    model: dict = field(default_factory=dict)  # workloads.common.model.GPTConfig fields
    batch_size_per_worker: int = 8
    learning_rate: float = 3e-4
    warmup_steps: int = 20
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    seed: int = 1234
    precision: str = "fp32"
    checkpoint_every_steps: int = 50
    report_every_steps: int = 10
    num_to_keep: int = 3
    max_failures: int = 3
    data_path: str | None = None
    data_max_bytes: int = 4 << 20
    # SPREAD places one worker per node where it can (as on the cluster); PACK fills nodes.
    placement_strategy: str = "PACK"
    storage_shared: bool = False
    # Print one progress line per step (rank 0) to the job log; the rehearsal parses them.
    log_every_step: bool = False
    # Fault injection for tests: rank `fail_rank` exits hard after step `fail_at_step`, once
    # (the marker file remembers that it happened).
    fail_at_step: int | None = None
    fail_rank: int = 0
    fail_marker: str | None = None
    # Benchmarks: rank 0 records the wall time at the end of every step, creates
    # `<timing_file>.go` after step `timing_from_step` and writes {first_step, times,
    # tokens_per_step, cpu_s (this process's CPU seconds from that step to the last),
    # report_s (seconds spent inside ray.train.report from that step on), reports} to
    # `timing_file` at the end.
    timing_file: str | None = None
    timing_from_step: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


def _lr_lambda(warmup: int, total: int):
    def f(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress))

    return f


def make_optimizer(model, *, learning_rate: float, weight_decay: float, fused: bool):
    """AdamW as the job uses it (betas 0.9/0.95), weight decay on matrices only: the job, and the
    benchmarks that stand in for it, build their optimizer here."""
    import torch

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=learning_rate, betas=(0.9, 0.95), fused=fused)


def _rng_state() -> dict:
    import numpy as np
    import torch

    state = {"torch": torch.get_rng_state(), "python": random.getstate(),
             "numpy": np.random.get_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state: dict) -> None:
    import numpy as np
    import torch

    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def _process_start_time() -> float:
    """Wall-clock time at which this process started (Linux /proc, 10 ms; 0.0 elsewhere)."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


class ReportPacing:
    """Notices, once, when ``ray.train.report()`` sets the pace of training.

    Ray Train's controller takes at most one report per worker per poll
    (RAY_TRAIN_HEALTH_CHECK_INTERVAL_S, 2 s by default), and each worker's report queue holds
    one: report() blocks until the previous report has been taken. When reports come more
    often than the polls, every report waits for the next poll and training runs at the poll's
    pace (measured here: 10 steps in ~1.5 s with the 2 s poll, 0.24 s in every report(), 0.78
    of plain DDP's throughput; bench/README.md, "Training"). On the cluster reports come every
    ``report_every_steps`` GPU steps, seconds apart; this says so when that does not hold.
    """

    def __init__(self, report_every_steps: int, *, warn_fraction: float = 0.05, min_reports: int = 5):
        self.report_every_steps = report_every_steps
        self.warn_fraction = warn_fraction
        self.min_reports = min_reports
        self.blocked_s = 0.0
        self.reports = 0
        self.warned = False

    def add(self, blocked_s: float, loop_s: float, poll_s: str) -> str | None:
        """Record one report() that blocked ``blocked_s`` after ``loop_s`` seconds of the loop;
        returns the warning (once) when reports took more than ``warn_fraction`` of the loop."""
        self.blocked_s += blocked_s
        self.reports += 1
        if self.warned or self.reports < self.min_reports or self.blocked_s <= self.warn_fraction * loop_s:
            return None
        self.warned = True
        apart = loop_s / self.reports
        return (f"ray.train.report() blocked {self.blocked_s:.1f} s of {loop_s:.1f} s of training "
                f"({100 * self.blocked_s / loop_s:.0f} %, {self.reports} reports): reports every "
                f"{self.report_every_steps} steps come {apart:.1f} s apart, faster than Ray Train's "
                f"controller takes them (one per poll, RAY_TRAIN_HEALTH_CHECK_INTERVAL_S={poll_s}). "
                f"Raise training.report_every_steps, or set RAY_TRAIN_HEALTH_CHECK_INTERVAL_S below "
                f"{apart:.1f} s.")


def train_func(config: dict) -> None:
    """The per-worker training loop."""
    import ray.train
    import ray.train.torch
    import torch
    import torch.distributed as dist
    from ray.train import Checkpoint, CheckpointUploadMode

    from workloads.common import checkpoint as ckpt
    from workloads.common import storage
    from workloads.common.model import GPT, GPTConfig
    from workloads.training.data import ByteWindows, DataPosition, load_corpus

    s = JobSettings(**config)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    if s.log_every_step:
        # When this worker process started and when the loop was entered (Ray worker start-up,
        # torch import and the gloo process group all happen in between), and on which node.
        print(f"TRAIN worker rank={rank} node={ray.get_runtime_context().get_node_id()[:12]} "
              f"proc_start={_process_start_time():.3f} t={time.time():.3f}", flush=True)
    device = ray.train.torch.get_device()
    if device.type == "cpu":
        torch.set_num_threads(max(1, int(s.cpus_per_worker)))
    fs, base = storage.filesystem_for(s.storage_path)

    # Same initial weights on every rank; per-rank RNG streams afterwards (dropout).
    marks = [("entry", time.time())]  # set-up phases, printed with the start/resume line
    torch.manual_seed(s.seed)
    gpt_config = GPTConfig(**s.model)
    model = GPT(gpt_config)
    marks.append(("model", time.time()))
    data = ByteWindows(load_corpus(s.data_path, s.data_max_bytes), gpt_config.block_size, s.seed)
    marks.append(("data", time.time()))
    pos = DataPosition()
    start_step = 0
    loaded = ckpt.load_latest_valid(base, s.run_name, filesystem=fs)
    marks.append(("checkpoint", time.time()))
    if loaded is not None:
        model.load_state_dict(loaded.state["model"])
        start_step = loaded.step
        pos = DataPosition(**loaded.meta["data_position"])
    random.seed(s.seed + rank)
    torch.manual_seed(s.seed + 7919 * (rank + 1))

    model = ray.train.torch.prepare_model(model)
    marks.append(("ddp_wrap", time.time()))
    optimizer = make_optimizer(model, learning_rate=s.learning_rate, weight_decay=s.weight_decay,
                               fused=device.type == "cuda")
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _lr_lambda(s.warmup_steps, s.steps))
    phases = " ".join(f"{name}={t - t0:.2f}s" for (_, t0), (name, t) in itertools.pairwise(marks))
    if loaded is not None:
        optimizer.load_state_dict(loaded.state["optimizer"])
        scheduler.load_state_dict(loaded.state["scheduler"])
        rng = loaded.state["rng"]
        if rank < len(rng):
            _set_rng_state(rng[rank])
        if rank == 0:
            print(f"TRAIN resume step={start_step} from={loaded.path} t={time.time():.3f} setup: {phases}", flush=True)
    elif rank == 0:
        print(f"TRAIN start step=0 (no checkpoint) t={time.time():.3f} setup: {phases}", flush=True)

    amp = device.type == "cuda" and s.precision == "bf16"
    tokens_per_step = s.batch_size_per_worker * world * gpt_config.block_size
    window_loss, window_n, window_t0 = 0.0, 0, time.perf_counter()
    step_times: list[float] = []
    cpu_at_go, report_s, reports = None, 0.0, 0
    pacing = ReportPacing(s.report_every_steps)
    poll_s = os.environ.get("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "2 (Ray's default)")
    loop_t0 = time.perf_counter()

    def paced(t_report: float) -> None:
        warning = pacing.add(time.perf_counter() - t_report, time.perf_counter() - loop_t0, poll_s)
        if warning and rank == 0:
            log.warning(warning)

    model.train()
    for step in range(start_step, s.steps):
        x, y = data.next_batch(pos, rank=rank, world_size=world, batch_size=s.batch_size_per_worker)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=amp):
            _, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), s.grad_clip)
        optimizer.step()
        scheduler.step()
        done = step + 1
        loss_value = loss.item()
        if s.timing_file and rank == 0:
            step_times.append(time.time())
            if done == s.timing_from_step:
                cpu_at_go = time.process_time()
                open(s.timing_file + ".go", "w").close()
        window_loss += loss_value
        window_n += 1
        if s.log_every_step and rank == 0:
            print(f"TRAIN step={done} loss={loss_value:.4f} t={time.time():.3f}", flush=True)
        if s.fail_at_step == done and rank == s.fail_rank and s.fail_marker and not os.path.exists(s.fail_marker):
            open(s.fail_marker, "w").close()
            print(f"TRAIN injected failure after step {done}", flush=True)
            os._exit(1)

        want_ckpt = done % s.checkpoint_every_steps == 0 or done == s.steps
        want_report = want_ckpt or done % s.report_every_steps == 0
        if not want_report:
            continue
        mean = torch.tensor([window_loss / window_n], device=device)
        dist.all_reduce(mean)
        elapsed = time.perf_counter() - window_t0
        metrics = {"step": done, "loss": mean.item() / world, "lr": scheduler.get_last_lr()[0],
                   "tokens_per_s": tokens_per_step * window_n / elapsed,
                   # The step this attempt resumed from (0: a fresh start).
                   "resumed_from": start_step}
        window_loss, window_n = 0.0, 0
        t_report = time.perf_counter()
        if not want_ckpt:
            ray.train.report(metrics)
            paced(t_report)
            if cpu_at_go is not None:
                report_s, reports = report_s + time.perf_counter() - t_report, reports + 1
            window_t0 = time.perf_counter()
            continue
        rng_states = [None] * world
        dist.all_gather_object(rng_states, _rng_state())
        checkpoint = None
        if rank == 0:
            local = tempfile.mkdtemp(prefix=f"ckpt-{done}-")
            ckpt.save(local, {
                "model": model.module.state_dict() if hasattr(model, "module") else model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "rng": rng_states,
            }, meta={"step": done, "run_name": s.run_name, "world_size": world,
                     "data_position": pos.to_dict(), "model_config": gpt_config.to_dict(),
                     "loss": metrics["loss"]})
            checkpoint = Checkpoint.from_directory(local)
        # Uploaded in the background (manifest last); training continues meanwhile.
        t_report = time.perf_counter()
        ray.train.report(metrics, checkpoint=checkpoint, checkpoint_dir_name=ckpt.dir_name(done),
                         checkpoint_upload_mode=CheckpointUploadMode.ASYNC,
                         checkpoint_upload_fn=ckpt.ray_upload_fn)
        paced(t_report)
        if cpu_at_go is not None and done < s.steps:
            report_s, reports = report_s + time.perf_counter() - t_report, reports + 1
        window_t0 = time.perf_counter()
    if rank == 0:
        print(f"TRAIN done step={s.steps} t={time.time():.3f}", flush=True)
        if s.timing_file:
            with open(s.timing_file, "w") as f:
                json.dump({"first_step": start_step + 1, "times": step_times,
                           "tokens_per_step": tokens_per_step,
                           "cpu_s": time.process_time() - (cpu_at_go or 0.0),
                           "report_s": report_s, "reports": reports}, f)


def check_cluster(s: JobSettings) -> list[str]:
    """Problems only visible once connected: a per-node storage path on a multi-node cluster."""
    import ray

    from workloads.common import storage

    if storage.is_s3(s.storage_path) or storage.is_shared_posix(s.storage_path) or s.storage_shared:
        return []
    nodes = [n for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU", 0) > 0]
    if len(nodes) > 1 and s.num_workers > 1:
        return [f"training.storage_path: {s.storage_path!r} is local to each node, but the Ray "
                f"cluster has {len(nodes)} worker nodes; use /fsx/... or s3://, or set "
                "training.storage_shared if every node sees this path"]
    return []


def run(s: JobSettings):
    """Run (or resume) the job on the connected Ray cluster; returns the ray.train.Result."""
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    from workloads.common import storage

    fs, base = storage.filesystem_for(s.storage_path)
    resources = {"CPU": s.cpus_per_worker}
    if s.gpus_per_worker:
        resources["GPU"] = s.gpus_per_worker
    trainer = TorchTrainer(
        train_func,
        train_loop_config=s.to_dict(),
        torch_config=TorchConfig(backend="nccl" if s.gpus_per_worker else "gloo"),
        scaling_config=ScalingConfig(num_workers=s.num_workers, use_gpu=s.gpus_per_worker > 0,
                                     resources_per_worker=resources,
                                     placement_strategy=s.placement_strategy),
        run_config=RunConfig(
            name=s.run_name, storage_path=base, storage_filesystem=fs,
            failure_config=FailureConfig(max_failures=s.max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=s.num_to_keep),
        ),
    )
    return trainer.fit()
