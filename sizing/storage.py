"""FSx for Lustre sized for the checkpoint burst of the training job.

One checkpoint writes the model's fp32 parameters and AdamW's two fp32 moments (the memory
estimator's bytes, sizing/training.py ``memory_per_gpu``, times the shards: every rank writes its
FSDP shard; DDP's replicas are written once). It may take ``fsx.checkpoint_write_share`` of the
checkpoint interval, ``training.checkpoint_every_steps`` at the estimated step time
(sizing/training.py ``step_seconds``: the GPUs' dense bf16 peak at an assumed MFU). FSx writes at
its throughput capacity, ``storage_capacity_gib`` x ``throughput_mb_s_per_tib`` (MB: 10^6 bytes),
and the data repository association's export to S3 reads the checkpoint back out at the same
throughput. A file system too slow for the cadence is a config error naming the write time, the
time allowed and the smallest capacity or throughput tier that would do.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from config import catalog
from config.environment import EnvironmentConfig
from config.storage import Fsx
from config.training import Training
from sizing import goodput, training
from sizing.goodput import GoodputSweep, duration
from sizing.training import TrainingPlacement

MB = 1_000_000  # FSx throughput is quoted in MB/s
GB = 1_000_000_000


def checkpoint_bytes(t: Training, workers: int) -> int:
    """Bytes one checkpoint of ``t`` writes over ``workers`` workers: parameters and optimizer
    state as the memory estimator holds them on each GPU, times the shards."""
    per_gpu = training.memory_per_gpu(t, workers)
    shards = workers if t.sharding == "fsdp" else 1
    return round((per_gpu["parameters"] + per_gpu["optimizer"]) * shards)


def fsx_bytes_per_second(capacity_gib: int, mb_s_per_tib: int) -> float:
    """Throughput capacity of a PERSISTENT_2 file system: capacity (TiB) x per-unit throughput."""
    return capacity_gib / 1024 * mb_s_per_tib * MB


def capacities(start: int = 1200) -> Iterator[int]:
    """PERSISTENT_2 capacities from ``start``: 1200, 2400, then multiples of 2400 GiB."""
    c = 1200 if start <= 1200 else 2400 * math.ceil(start / 2400)
    while True:
        yield c
        c = 2400 if c == 1200 else c + 2400


@dataclass(frozen=True)
class CheckpointSizing:
    """One environment's training checkpoint against its FSx. The times are None where no step
    time can be estimated (CPU workers, a chip without a peak figure): nothing is checked then."""

    preset: str | None
    parameters: int
    bytes: int
    gpus: int
    nodes: int
    efa_interfaces: int  # over the training nodes
    accelerator: str
    mfu: float
    step_seconds: float | None
    interval_steps: int
    write_share: float
    fsx_capacity_gib: int
    fsx_mb_s_per_tib: int
    fsx_bytes_per_second: float
    write_seconds: float  # at FSx's throughput; also the export's and a restore's read
    goodput: GoodputSweep | None

    @property
    def export_seconds(self) -> float:
        """The data repository association's export of one checkpoint to S3 reads it back out of
        FSx: at least the write time again (S3's side is not modelled)."""
        return self.bytes / self.fsx_bytes_per_second

    @property
    def interval_seconds(self) -> float | None:
        return None if self.step_seconds is None else self.interval_steps * self.step_seconds

    @property
    def allowed_seconds(self) -> float | None:
        """The time a checkpoint may take: the write share of the interval."""
        return None if self.interval_seconds is None else self.write_share * self.interval_seconds

    @property
    def headroom(self) -> float | None:
        """Allowed time over write time: below 1 the file system is too slow for the cadence."""
        return None if self.allowed_seconds is None else self.allowed_seconds / self.write_seconds

    def required_bytes_per_second(self) -> float | None:
        return None if self.allowed_seconds is None else self.bytes / self.allowed_seconds


def checkpoint_sizing(
    t: Training, p: TrainingPlacement, fsx: Fsx, *, node_mtbf_hours: float, node_replacement_seconds: int
) -> CheckpointSizing:
    """The checkpoint of ``t`` on the workers ``p``, written to ``fsx``, with the goodput sweep of
    the run (sizing/goodput.py) where a step time is estimated."""
    size = checkpoint_bytes(t, p.workers)
    rate = fsx_bytes_per_second(fsx.storage_capacity_gib, fsx.throughput_mb_s_per_tib)
    write = size / rate
    step = training.step_seconds(t, p)
    sweep = None
    if step is not None:
        sweep = goodput.sweep(
            nodes=p.nodes,
            node_mtbf_hours=node_mtbf_hours,
            # A restart reads the checkpoint back at the same throughput.
            downtime_seconds=node_replacement_seconds + t.restart_seconds + write,
            write_seconds=write,
            step_seconds=step,
            interval_steps=t.checkpoint_every_steps,
            run_steps=t.steps,
        )
    return CheckpointSizing(
        preset=t.model.preset,
        parameters=t.model.parameters(),
        bytes=size,
        gpus=p.workers * p.gpus_per_worker,
        nodes=p.nodes,
        efa_interfaces=p.efa_interfaces * p.nodes,
        accelerator=catalog.instance_spec(p.instance_type).accelerator,
        mfu=training.ASSUMED_MFU,
        step_seconds=step,
        interval_steps=t.checkpoint_every_steps,
        write_share=fsx.checkpoint_write_share,
        fsx_capacity_gib=fsx.storage_capacity_gib,
        fsx_mb_s_per_tib=fsx.throughput_mb_s_per_tib,
        fsx_bytes_per_second=rate,
        write_seconds=write,
        goodput=sweep,
    )


def burst_problems(c: CheckpointSizing) -> list[str]:
    """The checkpoint burst against FSx's throughput: one line naming the write time, the time
    allowed and the smallest throughput tier (at this capacity) or capacity (at this tier) that
    would do; none when it fits or nothing can be estimated."""
    need = c.required_bytes_per_second()
    if need is None or c.allowed_seconds is None or c.fsx_bytes_per_second >= need:
        return []
    tier = next(
        (x for x in catalog.FSX_PERSISTENT_2_THROUGHPUT if fsx_bytes_per_second(c.fsx_capacity_gib, x) >= need),
        None,
    )
    capacity = next(x for x in capacities(c.fsx_capacity_gib) if fsx_bytes_per_second(x, c.fsx_mb_s_per_tib) >= need)
    fixes = [f"fsx.storage_capacity_gib {capacity} at {c.fsx_mb_s_per_tib} MB/s/TiB"]
    if tier is not None:
        fixes.insert(0, f"fsx.throughput_mb_s_per_tib {tier} at {c.fsx_capacity_gib} GiB")
    name = c.preset or "the configured model"
    return [
        f"fsx.throughput_mb_s_per_tib: a checkpoint of {name} ({c.parameters / 1e9:.2f}B parameters: "
        f"{c.bytes / GB:.1f} GB of fp32 parameters and AdamW moments) takes {c.write_seconds:.0f} s to write at "
        f"{c.fsx_bytes_per_second / MB:.0f} MB/s ({c.fsx_capacity_gib} GiB x {c.fsx_mb_s_per_tib} MB/s/TiB), more "
        f"than the {c.allowed_seconds:.0f} s it may take (fsx.checkpoint_write_share {c.write_share:g} of "
        f"training.checkpoint_every_steps {c.interval_steps} x an estimated {c.step_seconds:.3g} s per step at "
        f"{c.mfu:.1%} MFU of {c.gpus} {c.accelerator} GPUs); it needs {need / MB:.0f} MB/s; allowed: "
        + ", or ".join(fixes)
        + f", or a longer training.checkpoint_every_steps (at least {math.ceil(c.interval_steps * c.write_seconds / c.allowed_seconds)})"
    ]


def dataset_gib(env: EnvironmentConfig) -> tuple[float, str] | None:
    """The training dataset's declared size on FSx and the field that declares it:
    ``training.dataset_size_gib``, else the pretokenize section's when its output is
    ``training.dataset_path``; None when no dataset is declared."""
    t, p = env.training, env.pretokenize
    if t.dataset_size_gib is not None:
        return t.dataset_size_gib, "training.dataset_size_gib"
    if p is not None and t.dataset_path is not None and t.dataset_path.rstrip("/") == p.output.rstrip("/"):
        return p.dataset_size_gib, "pretokenize.dataset_size_gib"
    return None


def capacity_problems(env: EnvironmentConfig, c: CheckpointSizing) -> list[str]:
    """FSx's capacity against what it holds for training: the dataset (``dataset_gib``) and the
    ``training.num_to_keep`` checkpoints kept (where the run's storage is on FSx), plus the
    pretokenize job's output when training does not read it. One line naming the numbers."""
    t = env.training
    on_fsx = t.resolved_storage_path(env.fsx.file_system_path).startswith("/fsx")
    ckpt_gib = c.bytes / (1 << 30) if on_fsx else 0.0
    declared = dataset_gib(env)
    data, field = declared if declared is not None else (0.0, "")
    other = ""
    if env.pretokenize is not None and field != "pretokenize.dataset_size_gib":
        data += env.pretokenize.dataset_size_gib
        other = f" + pretokenize.dataset_size_gib {env.pretokenize.dataset_size_gib:g} GiB"
    need = data + t.num_to_keep * ckpt_gib
    if need <= env.fsx.storage_capacity_gib:
        return []
    fit = next(x for x in capacities(env.fsx.storage_capacity_gib) if x >= need)
    dataset = f"{field} {declared[0]:g} GiB" if declared is not None else "no dataset"
    return [
        f"fsx.storage_capacity_gib: {env.fsx.storage_capacity_gib} GiB cannot hold {need:.0f} GiB: {dataset}{other} "
        f"+ training.num_to_keep {t.num_to_keep} checkpoints x {ckpt_gib:.1f} GiB; allowed: "
        f"fsx.storage_capacity_gib {fit} or more, or fewer checkpoints kept"
    ]


def data_problems(env: EnvironmentConfig) -> list[str]:
    """Training reads the pretokenize job's output with the tokenizer that made it."""
    t, p = env.training, env.pretokenize
    if p is None or t.dataset_path is None or t.dataset_path.rstrip("/") != p.output.rstrip("/"):
        return []
    if t.tokenizer != p.tokenizer:
        return [
            f"training.tokenizer: {t.tokenizer!r}, but training.dataset_path {t.dataset_path!r} is "
            f"pretokenize.output, tokenized with {p.tokenizer!r}; allowed: {p.tokenizer!r}"
        ]
    return []


TABLE_HEADERS = [
    "Environment",
    "GPUs",
    "EFA interfaces",
    "Parameters",
    "Checkpoint",
    "Step (est.)",
    "Interval",
    "FSx throughput",
    "Write time",
    "Allowed",
    "FSx headroom",
    "Goodput (configured)",
    "Optimum interval (Young/Daly)",
    "Goodput at optimum",
]


def table_row(env_name: str, c: CheckpointSizing | None) -> list[str]:
    """One environment's row of the sizing table (``c`` None: no training job is planned)."""
    if c is None:
        return [env_name, *(["n/a"] * (len(TABLE_HEADERS) - 1))]
    na = "n/a (no peak for the chip)" if c.gpus else "n/a (CPU workers)"
    g = c.goodput
    return [
        env_name,
        f"{c.gpus} {c.accelerator}" if c.gpus else "0",
        str(c.efa_interfaces),
        f"{c.parameters / 1e9:.3g}B" if c.parameters >= 1e9 else f"{c.parameters / 1e6:.3g}M",
        f"{c.bytes / GB:.3g} GB",
        na if c.step_seconds is None else f"{c.step_seconds:.3g} s ({c.mfu:.1%} MFU)",
        f"{c.interval_steps} steps" + ("" if c.interval_seconds is None else f" ({duration(c.interval_seconds)})"),
        f"{c.fsx_bytes_per_second / MB:.0f} MB/s ({c.fsx_capacity_gib} GiB x {c.fsx_mb_s_per_tib})",
        f"{c.write_seconds:.1f} s",
        na if c.allowed_seconds is None else f"{c.allowed_seconds:.1f} s ({c.write_share:.0%})",
        na if c.headroom is None else f"{c.headroom:.1f}x",
        na if g is None else f"{g.goodput:.2%}",
        na
        if g is None
        else f"{g.optimal_steps} steps ({duration(g.optimal_interval_seconds)})"
        + (f"; the run has {g.run_steps}" if g.optimal_steps > g.run_steps else ""),
        na if g is None else f"{g.optimal_goodput:.2%}",
    ]


# What the sizing table assumes, in the words the docs page and the review report both print.
ASSUMPTIONS = (
    "Checkpoint: fp32 parameters and AdamW's two fp32 moments, 12 bytes per parameter whatever "
    "`training.precision` (bf16 is compute only), over every FSDP shard (sizing/training.py's memory "
    "estimator). Step: the global batch's model FLOPs (6 x non-embedding parameters + attention, per "
    f"token) over the GPUs' dense bf16 peak (config/catalog.py) at {training.ASSUMED_MFU:.1%} MFU, the lower of "
    "two measurements of prod's step on one H200 (docs/benchmarks.md). FSx: storage capacity x per-unit throughput "
    "(MB = 10^6 bytes); the export to S3 reads each checkpoint back out at the same rate. Allowed: "
    "`fsx.checkpoint_write_share` of the checkpoint interval; headroom is allowed time over write time, and "
    "synth fails below 1x. Goodput: the first-order model of Young (1974) and Daly (2006) with the node MTBF "
    "`hyperpod.node_mtbf_hours` over the training nodes, a failure costing `hyperpod.node_replacement_seconds` + "
    "`training.restart_seconds` + reading the checkpoint back, plus half an interval redone; the write time is "
    "taken as the checkpoint's cost (the save is asynchronous, so this is a lower bound of goodput)."
)
