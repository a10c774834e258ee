"""The training job's workers on their instance group (``TrainingPlacement``, which the plan
derives: sizing/plan.py) and the checks of ``training:`` against them (nodes, shared storage,
FSDP sharding, the model's estimated memory per GPU), with the step-time estimate. Pure: reads
config sections, no Kubernetes, no aws_cdk."""

from __future__ import annotations

import math
from dataclasses import dataclass

from config import catalog
from config.hyperpod import InstanceGroup
from config.training import ModelSize, Training, accumulation_steps, batch_problems, sharding_problems


@dataclass(frozen=True)
class TrainingPlacement:
    """The Ray Train workers on the nodes of one instance group (sizing/plan.py places them)."""

    group: str
    instance_type: str
    workers: int
    nodes: int
    workers_per_node: int
    gpus_per_worker: int
    gpus_per_node: int
    efa_interfaces: int
    vcpus: int
    memory_gib: int


def fit_problems(t: Training, p: TrainingPlacement, group: InstanceGroup, *, fsx_file_system_path: str) -> list[str]:
    """How the workers ``p`` of ``training:`` fit ``group`` (whose ``Training.group_problems`` are
    none), one line per problem: nodes, shared storage, FSDP sharding, memory per GPU."""
    spec = catalog.instance_spec(group.instance_type)
    out: list[str] = []
    if p.nodes > group.instance_count:
        out.append(
            f"training.num_workers: {p.workers} workers need {p.nodes} {group.instance_type} "
            f"instances ({p.workers_per_node} per instance), but instance group "
            f"{group.name!r} has {group.instance_count}"
        )
    storage = t.resolved_storage_path(fsx_file_system_path)
    shared = storage.startswith(("s3://", "/fsx/")) or storage == "/fsx"
    if p.nodes > 1 and not (shared or t.storage_shared):
        out.append(
            f"training.storage_path: {storage!r} is local to each node, but the workers "
            f"span {p.nodes} nodes; use a path on FSx (/fsx/...) or s3://, or set "
            "training.storage_shared if every node mounts it"
        )
    out += sharding_problems(t, p.workers)
    out += batch_problems(t, p.workers, t.min_workers)
    out += memory_problems(t, spec, p.workers, instance_type=group.instance_type)
    if t.min_workers is not None and t.min_workers < p.workers and not out:
        # The shrink floor: fewer shards hold more state each (the micro-batch stays the same).
        out += memory_problems(t, spec, t.min_workers, instance_type=group.instance_type, floor=True)
    return out


# Share of a GPU's memory the estimate may use: the rest is the CUDA context, NCCL buffers and
# the caching allocator's fragmentation.
GPU_MEMORY_USABLE = 0.85


def memory_per_gpu(t: Training, workers: int) -> dict[str, float]:
    """Estimated bytes on each GPU at step time: fp32 parameters, fp32 gradients and AdamW's two
    fp32 moments (sharded 1/workers with FSDP, whole with DDP, which also keeps a gradient bucket
    copy), FSDP's unsharded 16-bit copies of two blocks (the one computing and the one
    prefetched), and activations for ``batch_size_per_worker`` sequences of ``block_size``
    tokens (stored block inputs plus one block recomputed with activation checkpointing, every
    block's intermediates without)."""
    m = t.model
    p = m.parameters()
    shards = workers if t.sharding == "fsdp" else 1
    low = 2 if t.precision == "bf16" else 4  # bytes per compute value
    d, f, s, b, layers = (
        m.n_embd,
        m.ffn_hidden if m.arch == "llama" else 4 * m.n_embd,
        m.block_size,
        t.batch_size_per_worker,
        m.n_layer,
    )
    kv = m.n_kv_head * (d // m.n_head) if m.arch == "llama" else d
    # One block's saved tensors per token: norms, q/k/v, attention output, projections (12d +
    # 4kv values) and the MLP's gate, up, product and activation (8f) (flash attention: no s^2).
    per_block = s * b * (6 * d + 2 * kv + 4 * f) * low
    block_inputs = s * b * d * low
    # full: every block keeps its input and one block is recomputed at a time; selective: every
    # n-th block does, the others keep everything; none: every block keeps everything.
    recomputed = {
        "full": layers,
        "selective": math.ceil(layers / t.activation_checkpointing_every),
        "none": 0,
    }[t.activation_checkpointing]
    activations = recomputed * block_inputs + (layers - recomputed) * per_block + (per_block if recomputed else 0)
    out = {
        "parameters": 4 * p / shards,
        "gradients": 4 * p / shards,
        "optimizer": 8 * p / shards,
        "activations": activations,
        "loss": loss_bytes(m, s * b, low),
    }
    if t.sharding == "fsdp":
        per_layer = (p - 2 * m.vocab_size * d) / layers
        # The block computing and the prefetched ones; without resharding after forward every
        # block's gathered parameters stay until its backward.
        held = layers if not t.fsdp_reshard_after_forward else 2 + t.fsdp_prefetch_blocks
        out["unsharded_blocks"] = min(layers, held) * per_layer * low
        if accumulation_steps(t, workers) > 1:
            # Accumulating without reduce-scatter (set_requires_gradient_sync(False) on all but
            # the last micro-batch): FSDP2 holds every parameter's unsharded gradient, in the
            # fp32 reduce dtype, until the last micro-batch reduces it.
            out["accumulated_gradients"] = 4 * p
    else:
        out["gradient_buckets"] = 4 * p
    return out


# The chunked loss's chunk: at most this many MiB of fp32 logits at once
# (workloads/common/loss.py DEFAULT_CHUNK_MIB, which the model's loss uses; a test pins both).
LOSS_CHUNK_MIB = 256.0


def loss_bytes(m: ModelSize, tokens: int, low: int) -> float:
    """What the output layer's loss (workloads/common/loss.py chunked_cross_entropy) holds for
    ``tokens`` tokens: the final norm's output it saves (``low`` bytes a value) and one fp32
    log-sum-exp per token, and at its peak, in backward, one chunk's fp32 logits; with 16-bit
    compute also their 16-bit copy and the output weight's fp32 gradient accumulator (in fp32
    the accumulator is the gradient itself). No fp32 copy of every logit: that would be
    ``tokens x vocab_size x 4`` bytes, twice with its gradient."""
    chunk = min(tokens, max(1, int(LOSS_CHUNK_MIB * (1 << 20)) // (4 * m.vocab_size)))
    extra = 0 if low == 4 else chunk * m.vocab_size * low + 4 * m.vocab_size * m.n_embd
    return tokens * (m.n_embd * low + 4) + chunk * m.vocab_size * 4 + extra


def memory_problems(
    t: Training, spec: catalog.InstanceSpec, workers: int, *, instance_type: str, floor: bool = False
) -> list[str]:
    """The model's estimated memory per GPU (``memory_per_gpu``) against the instance's GPUs;
    ``floor``: ``workers`` is the elastic run's shrink floor (``min_workers``), which the line names."""
    if not t.gpus_per_worker or not spec.gpu_memory_gib:
        return []
    need = sum(memory_per_gpu(t, workers).values()) / t.gpus_per_worker
    have = spec.gpu_memory_gib * (1 << 30) * GPU_MEMORY_USABLE
    if need <= have:
        return []
    name = t.model.preset or "the configured model"
    where = f"training.min_workers: {workers} (the shrink floor): " if floor else "training.model: "
    return [
        where + f"{name} ({t.model.parameters() / 1e9:.2f}B parameters) needs about "
        f"{need / (1 << 30):.1f} GiB per GPU with {t.sharding} over {workers} workers "
        f"(batch_size_per_worker {t.batch_size_per_worker}, block_size {t.model.block_size}, "
        f"activation_checkpointing {t.activation_checkpointing}), but "
        f"{instance_type} has {spec.gpu_memory_gib} GiB per {spec.accelerator} "
        f"({GPU_MEMORY_USABLE:.0%} usable: {have / (1 << 30):.1f} GiB); allowed: "
        + ("a larger min_workers, " if floor else "")
        + "a smaller preset, more workers with fsdp, a smaller batch"
        + ("" if t.activation_checkpointing == "full" else ", or activation_checkpointing full")
    ]


# Model FLOPs utilisation of the training step: bench/training_gpu.py measured 36.5 % and 37.6 %
# for prod's step on one H200 (docs/benchmarks.md, "The training step on one GPU"); Llama 3's
# pre-training reports 38-43 % on H100s at scale (Dubey et al. 2024, table 4). The lower
# measurement: FSDP's communication over many GPUs can only lower it. The FSx burst check, the
# goodput sweep and the review's prices read it.
ASSUMED_MFU = 0.365


def flops_per_token(m: ModelSize) -> float:
    """Training FLOPs per token: 6 x (the blocks' parameters + the output layer's width x
    vocab_size; the embedding is a lookup) + 12 x layers x context x width for the attention scores (the PaLM paper's appendix B accounting, as
    workloads.common.model.flops_per_token counts it for the built model; a test pins both)."""
    d, layers = m.n_embd, m.n_layer
    if m.arch == "gpt":
        per_layer = 12 * d * d
    else:
        kv = m.n_kv_head * (d // m.n_head)
        per_layer = 2 * d * d + 2 * d * kv + 3 * d * m.ffn_hidden + 2 * d
    return 6.0 * (layers * per_layer + d * m.vocab_size) + 12 * layers * m.block_size * d


def step_seconds(t: Training, p: TrainingPlacement, *, mfu: float = ASSUMED_MFU) -> float | None:
    """Estimated seconds of one optimizer step of ``t`` on the workers ``p``: the global batch's
    model FLOPs over the GPUs' dense bf16 peak (config/catalog.py) at ``mfu``. None for CPU
    workers or a chip without a peak figure."""
    peak = catalog.dense_bf16_tflops(p.instance_type)
    gpus = p.workers * p.gpus_per_worker
    if peak is None or gpus == 0:
        return None
    tokens = p.workers * t.batch_size_per_worker * accumulation_steps(t, p.workers) * t.model.block_size
    return tokens * flops_per_token(t.model) / (gpus * peak * 1e12 * mfu)
