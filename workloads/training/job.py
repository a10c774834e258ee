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
within a tolerance, not bitwise (tested).

One module because it is the per-worker training function Ray runs: model build, data, step,
checkpoint and resume are one control flow, read top to bottom as in Ray's examples.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
import pickle
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import concurrent.futures

    import ray.train
    import torch
    from torch import nn

    from config.job_settings import JobSettings
    from workloads.common.model import GPT, GPTConfig, Llama, LlamaConfig

log = logging.getLogger("workloads.training")

# What drives recovery after a node loss (measured in bench/training_recovery.py, see
# bench/README.md): Ray Train's controller polls the workers every
# RAY_TRAIN_HEALTH_CHECK_INTERVAL_S (2 s; a killed worker fails its next poll), then new worker
# processes start and restore the state. The same poll also paces report(): see ReportPacing.


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
    import torch

    with torch.autocast(
        device_type=x.device.type, dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None
    ):
        out: tuple[torch.Tensor, torch.Tensor] = model(x, y)
    loss = out[1]
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    scheduler.step()
    return loss


def rng_state() -> dict[str, Any]:
    """This process's random generators (python, numpy, torch CPU and CUDA)."""
    import numpy as np
    import torch

    state = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    import numpy as np
    import torch

    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def shard_model(
    model: GPT | Llama, *, sharding: str, device: torch.device, precision: str, activation_checkpointing: bool
) -> nn.Module:
    """FSDP2 (each decoder block, then the root) or DDP. bf16 compute with fp32 gradient
    reduction under FSDP's MixedPrecisionPolicy; the fp32 parameters stay the sharded master."""
    import torch

    model.activation_checkpointing = activation_checkpointing
    if sharding == "ddp":
        import ray.train.torch

        return ray.train.torch.prepare_model(model)
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from workloads.common import model as model_lib

    mp = (
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        if precision == "bf16" and device.type == "cuda"
        else MixedPrecisionPolicy()
    )
    # fully_shard moves each block's parameters and buffers to the device as it shards them (the
    # mesh's device: the GPU Ray Train assigned), so the whole model never sits on one GPU.
    for block in model.layers if isinstance(model, model_lib.Llama) else model.blocks:
        fully_shard(block, mp_policy=mp)
    # fully_shard returns the module it was given (its class swapped for an FSDP subclass).
    return cast("nn.Module", fully_shard(model, mp_policy=mp))


def build_model(
    model_config: GPTConfig | LlamaConfig,
    *,
    seed: int,
    sharding: str,
    device: torch.device,
    precision: str,
    activation_checkpointing: bool,
    initialize: bool = True,
) -> nn.Module:
    """The job's model on this rank, with the same initial weights on every rank and at every
    world size (those of ``torch.manual_seed(seed); build(model_config)``).

    FSDP: built on the meta device (no memory), sharded, then each rank allocates and
    initialises only its own shards (``init_parameters`` draws one whole tensor at a time), so
    a model larger than one worker's memory never exists whole on any worker. DDP: built whole
    on every rank, as DDP keeps it. ``initialize=False`` (FSDP, a resume that loads every
    parameter next): the shards are allocated but not drawn."""
    import torch

    from workloads.common import model as model_lib

    if sharding != "fsdp":
        torch.manual_seed(seed)
        return shard_model(
            model_lib.build(model_config),
            sharding=sharding,
            device=device,
            precision=precision,
            activation_checkpointing=activation_checkpointing,
        )
    with torch.device("meta"):
        built = model_lib.build(model_config)
    # The same module, sharded in place: ``built`` keeps its GPT or Llama type for the calls below.
    model = shard_model(
        built, sharding=sharding, device=device, precision=precision, activation_checkpointing=activation_checkpointing
    )
    model.to_empty(device=device)
    if initialize:
        model_lib.init_parameters(built, seed)
    elif isinstance(built, model_lib.Llama):
        built.reset_buffers()  # not in checkpoints
    return model


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
        return (
            f"ray.train.report() blocked {self.blocked_s:.1f} s of {loop_s:.1f} s of training "
            f"({100 * self.blocked_s / loop_s:.0f} %, {self.reports} reports): reports every "
            f"{self.report_every_steps} steps come {apart:.1f} s apart, faster than Ray Train's "
            f"controller takes them (one per poll, RAY_TRAIN_HEALTH_CHECK_INTERVAL_S={poll_s}). "
            f"Raise training.report_every_steps, or set RAY_TRAIN_HEALTH_CHECK_INTERVAL_S below "
            f"{apart:.1f} s."
        )


def train_func(config: dict[str, Any]) -> None:
    """The per-worker training loop."""
    called = time.time()  # the loop's set-up phases start here (printed with the start/resume line)
    import ray.train
    import ray.train.torch
    import torch
    import torch.distributed as dist
    from ray.train import Checkpoint, CheckpointUploadMode
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    from workloads.common import checkpoint as ckpt
    from workloads.common import model as model_lib
    from workloads.common.procfs import cpu_seconds, process_start_time
    from workloads.training import goodput
    from workloads.training.data import ByteWindows, DataPosition, load_corpus
    from workloads.training.determinism import use_deterministic

    config = dict(config)
    step_callback = config.pop("step_callback", None)
    submitted = config.pop("goodput_submitted", None)
    from config.job_settings import JobSettings

    s = JobSettings(**config)
    # Before the first CUDA work: cuBLAS reads its workspace setting when its handle is created.
    use_deterministic(s.deterministic)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    # Set-up phases, printed with the start/resume line: "imports" is this function's own imports
    # (DCP, FSDP2 and DTensor, the config models); Ray imports torch and sets up the process group
    # before calling it.
    marks = [("called", called), ("imports", time.time())]
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    if s.log_every_step:
        # When this worker process started and when the loop was entered (Ray worker start-up,
        # the torch import, the process group and this function's imports happen in between),
        # the CPU seconds the process used in between, and on which node.
        print(
            f"TRAIN worker rank={rank} node={ray.get_runtime_context().get_node_id()[:12]} "
            f"proc_start={process_start_time():.3f} t={time.time():.3f} cpu={cpu_seconds('self'):.2f}",
            flush=True,
        )
    device = ray.train.torch.get_device()
    if device.type == "cpu":
        torch.set_num_threads(max(1, int(s.cpus_per_worker)))
    # Checkpoint collectives run in the background (async save): a group of their own.
    ckpt_group = dist.new_group(backend="gloo")
    marks.append(("group", time.time()))  # a collective: it also waits for the last rank to arrive

    model_config = model_lib.config_from_dict(s.model)
    # Rank 0 lists the run's checkpoints: with none, a fresh start draws the initial weights.
    listed = [bool(ckpt.list_checkpoints(s.storage_path, s.run_name)) if rank == 0 else None]
    dist.broadcast_object_list(listed, src=0)
    model = build_model(
        model_config,
        seed=s.seed,
        sharding=s.sharding,
        device=device,
        precision=s.precision,
        activation_checkpointing=s.activation_checkpointing,
        # A resume overwrites every parameter from the checkpoint (minutes saved on a 7B model).
        initialize=not listed[0],
    )
    marks.append(("model", time.time()))
    data = ByteWindows(load_corpus(s.data_path, s.data_max_bytes), model_config.block_size, s.seed)
    marks.append(("data", time.time()))
    optimizer = make_optimizer(
        model, learning_rate=s.learning_rate, weight_decay=s.weight_decay, fused=device.type == "cuda"
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_schedule(s.warmup_steps, s.steps))
    marks.append(("optimizer", time.time()))

    def training_state(progress: dict[str, Any] | None) -> dict[str, Any]:
        # Everything but the tensors in one pickled entry: DCP flattens nested containers into
        # keys, and the per-rank RNG list changes length with the world size.
        model_sd, optim_sd = get_state_dict(model, optimizer)
        return {"model": model_sd, "optim": optim_sd, "progress": pickle.dumps(progress)}

    # Every rank verifies the shard files it will read of the newest checkpoint (rank 0 its
    # manifest and meta.json), so a restart's verification does not grow with one process; a
    # torn file anywhere makes every rank fall back to the previous checkpoint together.
    found: list[tuple[str, dict[str, Any], str] | None] = [None]
    state: dict[str, Any] = {}
    if listed[0]:
        state = training_state(None)
        loaded = ckpt.find_latest_valid_sharded(s.storage_path, s.run_name, state, process_group=ckpt_group)
        found = [None if loaded is None else (loaded.path, loaded.meta, loaded.format)]
        if loaded is None:
            # Every checkpoint is torn: start fresh, as without any (training_state gave the
            # optimizer its state).
            if s.sharding == "fsdp":
                # build_model's FSDP module is the GPT or Llama it built, sharded in place.
                model_lib.init_parameters(cast("GPT | Llama", model), s.seed)
            optimizer = make_optimizer(
                model, learning_rate=s.learning_rate, weight_decay=s.weight_decay, fused=device.type == "cuda"
            )
            scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_schedule(s.warmup_steps, s.steps))
    marks.append(("checkpoint", time.time()))

    pos, start_step, same_world = DataPosition(), 0, False
    if found[0] is not None:
        path, meta, fmt = found[0]
        if fmt != ckpt.SHARDED_FORMAT:
            raise ValueError(old_format_problem(s.run_name, path, fmt))
        if meta.get("model_config") != model_config.to_dict():
            raise ValueError(
                f"checkpoint {path} holds model {meta.get('model_config')}, the job "
                f"is configured for {model_config.to_dict()}"
            )
        ckpt.load_sharded(path, state)
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        progress = pickle.loads(state["progress"])
        scheduler.load_state_dict(progress["scheduler"])
        start_step = int(progress["step"])
        pos = DataPosition(**progress["data_position"])
        same_world = len(progress["rng"]) == world
        if same_world:
            set_rng_state(progress["rng"][rank])
        marks.append(("restore", time.time()))
    if not same_world:
        # Fresh start or a new world size: per-rank streams derived from the seed.
        random.seed(s.seed + rank)
        torch.manual_seed(s.seed + 7919 * (rank + 1))
    phases = " ".join(f"{name}={t - t0:.2f}s" for (_, t0), (name, t) in itertools.pairwise(marks))
    # Where the run's wall time goes (rank 0 keeps the accounts): workloads/training/goodput.py.
    accounts = goodput.Tracker.begin(
        enabled=rank == 0,
        run_name=s.run_name,
        run_dir=ctx.get_storage().experiment_fs_path,
        submitted=submitted,
        process_start=process_start_time(),
        restored_step=start_step,
        checkpoint_meta=found[0][1] if found[0] is not None else None,
    )
    if rank == 0:
        if found[0] is not None:
            print(
                f"TRAIN resume step={start_step} from={found[0][0]} world={world} t={time.time():.3f} setup: {phases}",
                flush=True,
            )
        else:
            print(f"TRAIN start step=0 (no checkpoint) world={world} t={time.time():.3f} setup: {phases}", flush=True)

    # FSDP casts to bf16 itself (MixedPrecisionPolicy); DDP uses autocast.
    autocast = torch.bfloat16 if device.type == "cuda" and s.precision == "bf16" and s.sharding == "ddp" else None
    tokens_per_step = s.batch_size_per_worker * world * model_config.block_size
    window_loss, window_n, window_t0 = 0.0, 0, time.perf_counter()
    pacing = ReportPacing(s.report_every_steps)
    poll_s = os.environ.get("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "2 (Ray's default)")
    loop_t0 = time.perf_counter()
    storage_dir = ctx.get_storage().experiment_fs_path
    # (future, step, directory) of the save in flight
    pending: tuple[concurrent.futures.Future[object], int, str] | None = None

    def paced(t_report: float) -> None:
        warning = pacing.add(time.perf_counter() - t_report, time.perf_counter() - loop_t0, poll_s)
        if warning and rank == 0:
            log.warning(warning)

    def finish_save() -> Checkpoint:
        """Wait for the save in flight (normally long done) and name it to Ray Train."""
        assert pending is not None, "called with a save in flight"
        future, _, directory = pending
        future.result()
        return Checkpoint(path=directory)

    model.train()
    for step in range(start_step, s.steps):
        x, y = data.next_batch(pos, rank=rank, world_size=world, batch_size=s.batch_size_per_worker)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = train_step(model, optimizer, scheduler, x, y, grad_clip=s.grad_clip, autocast_dtype=autocast)
        done = step + 1
        loss_value = loss.item()
        accounts.step_done(done)
        window_loss += loss_value
        window_n += 1
        if s.log_every_step and rank == 0:
            print(f"TRAIN step={done} loss={loss_value:.4f} t={time.time():.3f}", flush=True)
        if step_callback is not None:
            step_callback(
                StepInfo(
                    rank=rank,
                    world_size=world,
                    step=done,
                    loss=loss_value,
                    tokens=tokens_per_step,
                    last=done == s.steps,
                )
            )

        want_ckpt = done % s.checkpoint_every_steps == 0 or done == s.steps
        want_report = want_ckpt or done % s.report_every_steps == 0
        if not want_report:
            continue
        mean = torch.tensor([window_loss / window_n], device=device)
        dist.all_reduce(mean)
        elapsed = time.perf_counter() - window_t0
        metrics = {
            "step": done,
            "loss": mean.item() / world,
            "lr": scheduler.get_last_lr()[0],
            "tokens_per_s": tokens_per_step * window_n / elapsed,
            # The step this attempt resumed from (0: a fresh start).
            "resumed_from": start_step,
        }
        window_loss, window_n = 0.0, 0
        finished: list[tuple[Checkpoint, str]] = []  # saves done, to name to Ray Train
        if want_ckpt:
            goodput_record = accounts.checkpoint_record(done)
            # The previous save has had checkpoint_every_steps steps to finish in the background.
            if pending is not None:
                finished.append((finish_save(), ckpt.dir_name(pending[1])))
            rng_states = [None] * world
            dist.all_gather_object(rng_states, rng_state())
            directory = os.path.join(storage_dir, ckpt.dir_name(done))
            if rank == 0 and os.path.exists(directory):
                # Left by an earlier attempt that died at this step: never mixed with new shards.
                shutil.rmtree(directory)
            meta = {
                "step": done,
                "run_name": s.run_name,
                "world_size": world,
                "data_position": pos.to_dict(),
                "model_config": model_config.to_dict(),
                "loss": metrics["loss"],
                "goodput": goodput_record,
            }
            state = training_state(
                {"step": done, "data_position": pos.to_dict(), "rng": rng_states, "scheduler": scheduler.state_dict()}
            )
            pending = (
                ckpt.save_sharded(directory, state, meta, process_group=ckpt_group),
                done,
                directory,
            )
            if done == s.steps:
                finished.append((finish_save(), ckpt.dir_name(done)))
                pending = None
            accounts.charge("checkpoint")
        t_report = time.perf_counter()
        if not finished:
            ray.train.report(metrics)
        for checkpoint, name in finished:
            # Already in the run's directory with every shard and the manifest written: Ray
            # Train only records it (and deletes those beyond num_to_keep).
            ray.train.report(
                metrics,
                checkpoint=checkpoint,
                checkpoint_dir_name=name,
                checkpoint_upload_mode=CheckpointUploadMode.NO_UPLOAD,
            )
        paced(t_report)
        accounts.charge("other")
        accounts.publish(force=want_ckpt or done == s.steps)
        window_t0 = time.perf_counter()
    if rank == 0:
        print(f"TRAIN done step={s.steps} t={time.time():.3f}", flush=True)
        print(f"TRAIN goodput {accounts.accounts.summary()}", flush=True)


def old_format_problem(run_name: str, path: str, fmt: object) -> str:
    """The job resumes only the sharded (DCP) checkpoints it writes."""
    from workloads.common import checkpoint as ckpt

    return (
        f"training.run_name: run {run_name!r} has a checkpoint in format {fmt!r} ({path}), which this "
        f"job cannot resume; allowed: {ckpt.SHARDED_FORMAT!r} checkpoints (sharded, written by this job), "
        "or a new run_name"
    )


def check_resume(s: JobSettings) -> list[str]:
    """A run resumed from checkpoints of another format (the earlier single-writer one) or of
    another model shape (before anything starts). The newest checkpoint with a readable
    manifest and meta decides, as the newest intact one is what the job would load."""
    from workloads.common import checkpoint as ckpt
    from workloads.common import model as model_lib

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
