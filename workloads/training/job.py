"""The Ray Train job: a Llama-style decoder on byte tokens, sharded with FSDP2 (or DDP for small
models), with sharded asynchronous checkpoints and exact, fault-tolerant resume.

``train_func`` is the per-worker loop (it builds its own model and data); ``run`` wraps it in a
``TorchTrainer`` with the scaling, failure and checkpoint settings from ``JobSettings``.

Resume: every rank loads the newest checkpoint that verifies (each rank hashes the shard files
it reads; the ranks agree), resharded by DCP to the current world size. At the same world size
the run continues bitwise as if uninterrupted on CPU with gloo (tested); on GPUs within a small
tolerance, as nondeterministic kernels allow (``training.deterministic`` turns them off). On
another world size the weights, optimizer state, step, schedule and data position carry over;
the global batch is ``batch_size_per_worker`` times the new world size, so the run continues
within a tolerance, not bitwise (tested). With ``training.global_batch_size`` the global batch
holds instead: each step accumulates as many micro-batches as the new world size needs, over the
same windows, and the run continues within the last bits (the gradient norm's and the
reduction's summation order: tested, 4 -> 2 workers).

``train_func`` reads top to bottom as in Ray's and torchtitan's examples, a short loop over the
job's parts, each in its own module with its own slice of the settings: the model's build and
sharding (parallelize.py), the data (data.py), the checkpoints: load the newest valid, save,
verify, fall back together (checkpointer.py), the reports: metrics, pacing, goodput
(reporter.py). The step itself (``train_step``, ``accumulate_step`` and their helpers) stays
here and imports no pydantic: the benchmarks run it without the config stack. It stays one module
because the loop, the step it calls and ``run``, which wraps them, are read together; moving the
step out is the next split when it grows.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import ray.train
    import torch
    from torch import nn

    from config.job_settings import JobSettings

log = logging.getLogger("workloads.training")


@dataclass(frozen=True)
class StepInfo:
    """What a step callback (``run(..., step_callback=f)``) gets after every optimizer step, on
    every rank."""

    rank: int
    world_size: int
    step: int  # optimizer steps done in the whole run
    loss: float
    tokens: int  # tokens of this step over all ranks
    last: bool  # the run's final step


def lr_schedule(warmup: int, total: int) -> Callable[[int], float]:
    """The LR multiplier per step: linear warmup, then cosine decay to 10 %."""

    def f(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress))

    return f


def make_optimizer(model: nn.Module, *, learning_rate: float, weight_decay: float, fused: bool) -> torch.optim.AdamW:
    """AdamW as the job uses it (betas 0.9/0.95), weight decay on matrices only: the job, and the
    benchmarks that stand in for it, build their optimizer here."""
    import torch

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=learning_rate,
        betas=(0.9, 0.95),
        fused=fused,
    )


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    grad_clip: float,
    autocast_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """One optimizer step of the job (forward, backward, clip, AdamW, schedule); returns the loss
    tensor. FSDP2 and DDP reduce the gradients inside ``backward``."""
    return train_step_with_norm(model, optimizer, scheduler, x, y, grad_clip=grad_clip, autocast_dtype=autocast_dtype)[
        0
    ]


def train_step_with_norm(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    grad_clip: float,
    autocast_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``train_step``, also returning the gradients' total norm before clipping (a tensor, on
    the device; with FSDP a DTensor: ``grad_norm_value`` reads it, a collective)."""
    import torch

    with torch.autocast(
        device_type=x.device.type, dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None
    ):
        out: tuple[None, torch.Tensor] = model(x, y, logits=False)
    loss = out[1]
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    scheduler.step()
    return loss, norm


def grad_norm_value(norm: torch.Tensor) -> float:
    """The total gradient norm ``clip_grad_norm_`` returned, as a number (FSDP2's is a DTensor
    whose full value needs every rank: call it on all of them)."""
    full = norm.full_tensor() if hasattr(norm, "full_tensor") else norm
    return float(full.item())


def accumulate_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    micro_batches: int,
    grad_clip: float,
    autocast_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One optimizer step over ``micro_batches`` equal slices of this rank's batch ``x``, ``y``
    (gradient accumulation, ``training.global_batch_size``): each slice's loss over the slice
    count, so the gradient is the whole batch's mean, as one pass over it would give. The
    gradients are reduced across ranks only on the last slice (FSDP2
    ``set_requires_gradient_sync``; DDP ``no_sync``). Returns the batch's mean loss and, as
    ``train_step_with_norm``, the gradients' total norm before clipping, computed once on the
    accumulated (reduced) gradients after the last slice."""
    import contextlib

    import torch
    from torch.distributed.fsdp import FSDPModule
    from torch.nn.parallel import DistributedDataParallel

    if micro_batches == 1:
        return train_step_with_norm(
            model, optimizer, scheduler, x, y, grad_clip=grad_clip, autocast_dtype=autocast_dtype
        )
    optimizer.zero_grad(set_to_none=True)
    total = torch.zeros((), device=x.device)
    for i, (xm, ym) in enumerate(zip(x.chunk(micro_batches), y.chunk(micro_batches), strict=True)):
        last = i == micro_batches - 1
        sync: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        if isinstance(model, FSDPModule):
            model.set_requires_gradient_sync(last)
        elif isinstance(model, DistributedDataParallel) and not last:
            sync = model.no_sync()
        with sync:  # forward and backward both inside DDP's no_sync
            with torch.autocast(
                device_type=x.device.type, dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None
            ):
                out: tuple[None, torch.Tensor] = model(xm, ym, logits=False)
            loss = out[1] / micro_batches
            loss.backward()
        total += loss.detach()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    scheduler.step()
    return total, norm


def optimizers_for(
    model: nn.Module, s: JobSettings, *, fused: bool
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """The job's optimizer and learning-rate schedule for ``model``."""
    import torch

    optimizer = make_optimizer(model, learning_rate=s.learning_rate, weight_decay=s.weight_decay, fused=fused)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lr_schedule(s.warmup_steps, s.steps))


def train_func(config: dict[str, Any]) -> None:
    """The per-worker training loop, over its parts: the model built and sharded
    (parallelize.py), the data (data.py), the checkpoints (checkpointer.py), the reports
    (reporter.py)."""
    called = time.time()  # the loop's set-up phases start here (printed with the start/resume line)
    import ray.train
    import ray.train.torch
    import torch

    from config.job_settings import JobSettings
    from config.training import accumulation_steps
    from workloads.common import model as model_lib
    from workloads.training import parallelize
    from workloads.training.checkpointer import Checkpointer, export_final
    from workloads.training.data import DataPosition, open_data
    from workloads.training.determinism import use_deterministic
    from workloads.training.evaluate import evaluate
    from workloads.training.reporter import Reporter, print_worker_line

    config = dict(config)
    step_callback = config.pop("step_callback", None)
    submitted = config.pop("goodput_submitted", None)
    s = JobSettings(**config)
    # Before the first CUDA work: cuBLAS reads its workspace setting when its handle is created.
    use_deterministic(s.deterministic)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    # Set-up phases, printed with the start/resume line: "imports" is this function's own imports
    # (DCP, FSDP2 and DTensor, the config models); Ray imports torch and sets up the process group
    # before calling it.
    marks = [("called", called), ("imports", time.time())]
    ctx = ray.train.get_context()
    rank, world, run_dir = ctx.get_world_rank(), ctx.get_world_size(), ctx.get_storage().experiment_fs_path
    if s.log_every_step:
        print_worker_line(rank)
    device = ray.train.torch.get_device()
    if device.type == "cpu":
        torch.set_num_threads(max(1, int(s.cpus_per_worker)))
    checkpointer = Checkpointer.from_settings(s, rank=rank, world=world, run_dir=run_dir)
    marks.append(("group", time.time()))  # a collective: it also waits for the last rank to arrive

    model_config = model_lib.config_from_dict(s.model)
    saved = checkpointer.any_saved()
    # A resume overwrites every parameter from the checkpoint, a fresh start from init_from from
    # the Hugging Face folder (minutes saved on a 7B model).
    model = parallelize.build_from_settings(s, model_config, device, initialize=not saved and s.init_from is None)
    marks.append(("model", time.time()))
    data = open_data(s, rank=rank, world=world, block_size=model_config.block_size, vocab_size=model_config.vocab_size)
    marks.append(("data", time.time()))
    new_optimizers = functools.partial(optimizers_for, model, s, fused=device.type == "cuda")
    optimizers = new_optimizers()
    marks.append(("optimizer", time.time()))
    resumed = checkpointer.restore(model, optimizers, model_config, saved=saved, new=new_optimizers, marks=marks)
    optimizer, scheduler, pos = resumed.optimizer, resumed.scheduler, resumed.position
    # A fresh start reads training.init_from (each rank its own shard); a resume ignores it.
    init = parallelize.initial_weights(model, s.init_from, resumed.meta, process_group=checkpointer.group)
    if init is not None and resumed.meta is None:
        marks.append(("init_from", time.time()))
        if rank == 0:
            log.info("initialised from %s (%s)", init["path"], init["digest"])
    # Gradient accumulation holds training.global_batch_size at whatever world this attempt got.
    micro = accumulation_steps(s, world)
    if s.compile:  # one forward and backward compiles the blocks, timed as a set-up phase
        x, y = data.train.next_batch(DataPosition(), rank=rank, world_size=world, batch_size=s.batch_size_per_worker)
        model(x.to(device), y.to(device), logits=False)[1].backward()
        optimizer.zero_grad(set_to_none=True)
        marks.append(("compile", time.time()))
    tokens_per_step = s.batch_size_per_worker * micro * world * model_config.block_size
    reporter = Reporter.from_settings(s, rank, world, tokens_per_step, device, run_dir, submitted, resumed)
    reporter.announce(resumed, marks)
    # FSDP casts to bf16 itself (MixedPrecisionPolicy); DDP uses autocast.
    autocast = torch.bfloat16 if device.type == "cuda" and s.precision == "bf16" and s.sharding == "ddp" else None

    model.train()
    evaluated: dict[str, float] = {}  # the latest evaluation, in every report and checkpoint after it
    for step in range(resumed.step, s.steps):
        x, y = data.train.next_batch(pos, rank=rank, world_size=world, batch_size=s.batch_size_per_worker * micro)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss, norm = accumulate_step(
            model, optimizer, scheduler, x, y, micro_batches=micro, grad_clip=s.grad_clip, autocast_dtype=autocast
        )
        done, loss_value = step + 1, loss.item()
        reporter.step_done(done, loss_value)
        if step_callback is not None:
            step_callback(StepInfo(rank, world, done, loss_value, tokens_per_step, last=done == s.steps))
        if data.held_out is not None and (done % s.eval_every_steps == 0 or done == s.steps):
            evaluated = {"val_step": done} | evaluate(
                model,
                data.held_out,
                rank=rank,
                world=world,
                batch_size=s.batch_size_per_worker,
                device=device,
                autocast_dtype=autocast,
            )
            reporter.evaluated(evaluated)
            reporter.accounts.charge("other")
        want_ckpt = checkpointer.due(done)
        if not (want_ckpt or reporter.due(done)):
            continue
        metrics = reporter.metrics(done, scheduler.get_last_lr()[0], resumed_from=resumed.step)
        metrics |= {"grad_norm": grad_norm_value(norm), **evaluated}
        reporter.set_gauges(metrics)
        finished = []  # saves done, to name to Ray Train
        if want_ckpt:
            goodput = reporter.accounts.checkpoint_record(done)
            meta = {
                "model_config": model_config.to_dict(),
                "loss": metrics["loss"],
                "grad_norm": metrics["grad_norm"],
                "goodput": goodput,
                **({"evaluation": evaluated} if evaluated else {}),
            }
            if init is not None:
                meta["init_from"] = init
            finished = checkpointer.save(done, model, (optimizer, scheduler), pos, meta)
            reporter.accounts.charge("checkpoint")
        reporter.report(metrics, finished, force=want_ckpt or done == s.steps)
    exported = export_final(s, run_dir, rank=rank, group=checkpointer.group)
    if exported is not None and rank == 0:
        log.info("exported the final checkpoint to %s", exported)
    reporter.finish()


def check_resume(s: JobSettings) -> list[str]:
    """A run resumed from checkpoints of another format (the earlier single-writer one) or of
    another model shape (before anything starts). The newest checkpoint with a readable
    manifest and meta decides, as the newest intact one is what the job would load."""
    from workloads.common import checkpoint as ckpt
    from workloads.common import model as model_lib
    from workloads.training.checkpointer import old_format_problem

    want = model_lib.config_from_dict(s.model).to_dict()
    for _, path in ckpt.list_checkpoints(s.storage_path, s.run_name):
        try:
            with open(os.path.join(path, ckpt.MANIFEST), "rb") as f:
                fmt = json.loads(f.read()).get("format")
            with open(os.path.join(path, ckpt.META), "rb") as f:
                have = json.loads(f.read()).get("model_config") or {}
        except (OSError, ValueError, AttributeError):
            continue
        if fmt != ckpt.SHARDED_FORMAT:
            return [old_format_problem(s.run_name, path, fmt)]
        if have == want:
            return []
        diff = ", ".join(
            f"{k} {have.get(k)!r} -> {want.get(k)!r}"
            for k in sorted(set(want) | set(have))
            if have.get(k) != want.get(k)
        )
        return [
            f"training.model: run {s.run_name!r} has checkpoints of another model shape "
            f"({path}: {diff}); allowed: the checkpoint's shape, or a new run_name"
        ]
    return []


def check_cluster(s: JobSettings) -> list[str]:
    """Problems only visible once connected: a per-node storage path on a multi-node cluster."""
    import ray

    from workloads.common import storage

    if storage.is_s3(s.storage_path) or storage.is_shared_posix(s.storage_path) or s.storage_shared:
        return []
    # ray.nodes carries no annotations.
    nodes = [n for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU", 0) > 0]  # type: ignore[no-untyped-call]
    if len(nodes) > 1 and s.num_workers > 1:
        return [
            f"training.storage_path: {s.storage_path!r} is local to each node, but the Ray "
            f"cluster has {len(nodes)} worker nodes; use /fsx/... or s3://, or set "
            "training.storage_shared if every node sees this path"
        ]
    return []


def scaling_config(s: JobSettings) -> ray.train.ScalingConfig:
    """The Ray Train workers ``s`` asks for: their count and each one's bundle (the autoscaling
    check of sizing/autoscaling.py places the same bundles)."""
    from ray.train import ScalingConfig

    resources = {"CPU": s.cpus_per_worker}
    if s.gpus_per_worker:
        resources["GPU"] = s.gpus_per_worker
    return ScalingConfig(
        # Ray Train v2 (the one enabled at run time) takes (min, max) for an elastic run;
        # ray.train's static ScalingConfig is v1's, whose annotation names int only.
        num_workers=(s.min_workers, s.num_workers) if s.min_workers else s.num_workers,  # type: ignore[arg-type]
        use_gpu=s.gpus_per_worker > 0,
        resources_per_worker=resources,
        placement_strategy=s.placement_strategy,
    )


# Ray Train reads it in the controller, which gets it from the driver's environment
# (ray.train.v2._internal.constants ENV_VARS_TO_PROPAGATE): how long a new worker group waits for
# its placement group before the controller decides again (worker_group.py, _start).
WORKER_GROUP_START_TIMEOUT_ENV = "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S"


def controller_env(s: JobSettings) -> dict[str, str]:
    """The Ray Train controller's environment from ``s``: ``replacement_wait_s``, how long a
    restart waits for the lost node's replacement before an elastic run shrinks (docs/workloads.md,
    "Recovery settings")."""
    return {WORKER_GROUP_START_TIMEOUT_ENV: str(s.replacement_wait_s)}


def run(s: JobSettings, *, step_callback: Callable[[StepInfo], None] | None = None) -> ray.train.Result:
    """Run (or resume) the job on the connected Ray cluster; returns the ray.train.Result.

    ``step_callback(StepInfo)`` runs on every rank after every step (tests and benchmarks
    observe or interrupt the loop through it). Raises ``ConfigError`` before anything starts
    when the run's checkpoints hold another model shape."""
    from config import ConfigError

    problems = check_resume(s)
    if problems:
        raise ConfigError("resume", problems)
    if s.dataset_path is not None:
        # Before any worker starts (the head mounts FSx as the workers do); the workers check
        # again and hash the shards (workloads/training/data.py open_data).
        from workloads.common import model as model_lib
        from workloads.training.data import check_dataset

        vocab = model_lib.config_from_dict(s.model).vocab_size
        try:
            check_dataset(s.dataset_path, tokenizer=s.tokenizer, vocab_size=vocab)
        except ValueError as err:
            raise ConfigError("dataset", [str(err)]) from None
    from ray.train import CheckpointConfig, FailureConfig, RunConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    from workloads.common import storage

    fs, base = storage.filesystem_for(s.storage_path)
    os.environ.update(controller_env(s))  # the driver's environment reaches the controller
    trainer = TorchTrainer(
        train_func,
        train_loop_config={**s.to_dict(), "step_callback": step_callback, "goodput_submitted": time.time()},
        torch_config=TorchConfig(backend="nccl" if s.gpus_per_worker else "gloo"),
        scaling_config=scaling_config(s),
        run_config=RunConfig(
            name=s.run_name,
            storage_path=base,
            storage_filesystem=fs,
            failure_config=FailureConfig(max_failures=s.max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=s.num_to_keep),
        ),
    )
    return trainer.fit()
