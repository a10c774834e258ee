"""The `training:` section: the Ray Train job (owned by the training workload).

The values and their checks: the group named here exists, the catalog knows its GPUs and
``gpus_per_worker`` divides them (``group_problems``, one of EnvironmentConfig's CROSS_CHECKS).
Worker and node counts are derived from that group, the same one the CDK app creates, by the
environment's plan (sizing/plan.py), and checked there (sizing/training.py: workers against the
group's nodes, shared storage, FSDP sharding, the model's estimated memory per GPU) when the
config loads. The train loop's fields are ``TrainLoop``'s, which ``Training`` extends and
config/job_settings.py's ``JobSettings`` adds the cluster's values to.

One module because it is one config section: each check sits next to the value it guards.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from config import catalog
from config.base import Frozen
from config.hyperpod import InstanceGroup, default_gpu_group

RUN_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


# Named model sizes (workloads.common.model.LlamaConfig shapes). Widths, depths, head counts and
# SwiGLU widths are those of Llama 3.2 1B / 3B and Llama 3 8B, and Llama 2 13B's width and
# depth with 8 key/value heads; the counts (``params``, exact, tested on the meta device) are at
# the default ``vocab_size`` of 256 byte tokens, so below the names' origins, and each preset is
# named after its own count (a 128k vocabulary adds 2 x vocab_size x n_embd).
PRESETS: dict[str, dict] = {
    # The local size: a step in milliseconds on one CPU core.
    "tiny": {
        "n_layer": 2,
        "n_head": 4,
        "n_kv_head": 2,
        "n_embd": 64,
        "ffn_hidden": 192,
        "block_size": 64,
        "params": 131_392,
    },
    "llama-76m": {
        "n_layer": 12,
        "n_head": 12,
        "n_kv_head": 4,
        "n_embd": 768,
        "ffn_hidden": 2048,
        "block_size": 1024,
        "params": 75_909_888,
    },
    "llama-1b": {
        "n_layer": 16,
        "n_head": 32,
        "n_kv_head": 8,
        "n_embd": 2048,
        "ffn_hidden": 8192,
        "block_size": 2048,
        "params": 974_194_688,
    },
    "llama-3b": {
        "n_layer": 28,
        "n_head": 24,
        "n_kv_head": 8,
        "n_embd": 3072,
        "ffn_hidden": 8192,
        "block_size": 2048,
        "params": 2_820_320_256,
    },
    "llama-7b": {
        "n_layer": 32,
        "n_head": 32,
        "n_kv_head": 8,
        "n_embd": 4096,
        "ffn_hidden": 14336,
        "block_size": 2048,
        "params": 6_981_685_248,
    },
    "llama-11b": {
        "n_layer": 40,
        "n_head": 40,
        "n_kv_head": 8,
        "n_embd": 5120,
        "ffn_hidden": 13824,
        "block_size": 2048,
        "params": 11_013_084_160,
    },
}

# Llama 3.2 1B/3B and Llama 3.1 8B/70B as Hugging Face publishes them (their config.json files):
# the shapes as workloads.common.model.LlamaConfig fields, ``tie_word_embeddings`` (the
# platform's Llama keeps its own head: a tied folder's embedding is copied into it), the base
# models' special tokens (<|begin_of_text|>, <|end_of_text|>) and ``params``, the published
# parameter count (tied embeddings counted once). workloads/common/hf_llama.py reads them from here.
_ROPE_LLAMA3 = {"rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0}
_HF_VOCAB = 128256


def _hf(n_layer: int, n_head: int, n_embd: int, ffn_hidden: int, factor: float, tied: bool, params: int) -> dict:
    return {
        "n_layer": n_layer,
        "n_head": n_head,
        "n_kv_head": 8,
        "n_embd": n_embd,
        "ffn_hidden": ffn_hidden,
        "vocab_size": _HF_VOCAB,
        "block_size": 131072,
        "rope_theta": 500000.0,
        "norm_eps": 1e-5,
        "rope_scaling": {**_ROPE_LLAMA3, "factor": factor, "original_max_position_embeddings": 8192},
        "tie_word_embeddings": tied,
        "bos_token_id": 128000,
        "eos_token_id": 128001,
        "params": params,
    }


HF_PRESETS: dict[str, dict] = {
    "llama-3.2-1b": _hf(16, 32, 2048, 8192, 32.0, True, 1_235_814_400),
    "llama-3.2-3b": _hf(28, 24, 3072, 8192, 32.0, True, 3_212_749_824),
    "llama-3.1-8b": _hf(32, 32, 4096, 14336, 8.0, False, 8_030_261_248),
    "llama-3.1-70b": _hf(80, 64, 8192, 28672, 8.0, False, 70_553_706_496),
}
# Their training context: the models' pre-training context (original_max_position_embeddings);
# block_size bounds what a step holds, and the llama3 rope scaling stays as published.
HF_TRAIN_CONTEXT = 8192
# The Hugging Face models as presets of the job's model (``params``: the platform's count, its
# head untied, so a tied model's embedding counts twice); not 70B: its fp32 weights, gradients
# and AdamW moments (1.1 TB) are beyond the clusters the configs declare.
TRAINABLE_HF = ("llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b")
PRESETS.update(
    {
        name: {
            **{k: v for k, v in hf.items() if k not in ("tie_word_embeddings", "bos_token_id", "eos_token_id")},
            "block_size": HF_TRAIN_CONTEXT,
            "params": hf["params"] + (hf["vocab_size"] * hf["n_embd"] if hf["tie_word_embeddings"] else 0),
        }
        for name, hf in HF_PRESETS.items()
        if name in TRAINABLE_HF
    }
)
# The keys of a llama3 ``rope_scaling`` besides its rope_type (workloads.common.model reads them).
LLAMA3_ROPE_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
_SHAPE = ("n_layer", "n_head", "n_kv_head", "n_embd", "ffn_hidden", "block_size")
# Fields of the Llama's config written only where they differ from the model's defaults, so the
# settings and checkpoints of byte-token models stay as they were.
_LLAMA_DEFAULTS = {"vocab_size": 256, "rope_theta": 500000.0, "norm_eps": 1e-5, "rope_scaling": None}


class ModelSize(Frozen):
    """The model architecture (workloads.common.model): a preset, or every shape field given."""

    arch: Literal["llama", "gpt"] = Field(
        default="llama",
        description=(
            "llama: RMSNorm, rotary embeddings, SwiGLU and grouped-query attention (the job's model); "
            "gpt: the small GPT (LayerNorm, learned positions, GELU), for small DDP runs. A preset sets llama."
        ),
    )
    preset: str | None = Field(
        default=None,
        description=(
            "A named size: tiny, llama-76m, llama-1b, llama-3b, llama-7b or llama-11b (byte tokens), or a "
            "Hugging Face model's shape: llama-3.2-1b, llama-3.2-3b or llama-3.1-8b (its "
            "128256-token vocabulary and rope scaling, for training.init_from) (config.training.PRESETS); "
            "shape fields given next to it override the preset's. null: the shape fields as given."
        ),
    )
    n_layer: int = Field(default=12, ge=1, le=128, description="Transformer blocks.")
    n_head: int = Field(default=12, ge=1, le=128, description="Attention heads; must divide n_embd.")
    n_kv_head: int = Field(
        default=4,
        ge=1,
        le=128,
        description=("Key/value heads of grouped-query attention (llama only); must divide n_head."),
    )
    n_embd: int = Field(default=768, ge=8, le=16384, description="Embedding width.")
    ffn_hidden: int = Field(default=2048, ge=8, le=65536, description="Hidden width of the SwiGLU MLP (llama only).")
    block_size: int = Field(default=512, ge=8, le=8192, description="Context length in tokens.")
    vocab_size: int = Field(
        default=256,
        ge=256,
        le=262_144,
        description=(
            "Rows of the token embedding and the output layer: 256 for byte tokens (training.tokenizer "
            "'bytes'), else at least the tokenizer's vocabulary (128256 for Llama 3's); the job refuses a "
            "dataset whose tokenizer has more ids. Counted in the parameters, memory and FLOPs estimates."
        ),
    )
    rope_theta: float = Field(default=500000.0, gt=0, description="Rotary embedding base (llama only).")
    norm_eps: float = Field(default=1e-5, gt=0, lt=1, description="RMSNorm epsilon (llama only).")
    rope_scaling: dict[str, Any] | None = Field(
        default=None,
        description=(
            "Llama 3.1 rotary frequency scaling as Hugging Face's config.json spells it: rope_type 'llama3' "
            "with factor, low_freq_factor, high_freq_factor and original_max_position_embeddings (llama only); "
            "null: plain rotary embeddings."
        ),
    )
    # No dropout by default: the corpus is large relative to the step budget, and it keeps runs
    # reproducible.
    dropout: float = Field(
        default=0.0, ge=0.0, lt=1.0, description="Dropout rate (gpt only); 0 keeps runs reproducible."
    )

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, data):
        if not isinstance(data, dict) or data.get("preset") is None:
            return data
        name = data["preset"]
        if name not in PRESETS:
            raise ValueError(f"training.model.preset: {name!r} is not a preset; allowed: {', '.join(PRESETS)}")
        shape = {k: v for k, v in PRESETS[name].items() if k != "params"}
        return {**shape, "arch": "llama", **data}

    @field_validator("rope_scaling")
    @classmethod
    def _rope_scaling(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is None:
            return v
        missing = [k for k in LLAMA3_ROPE_KEYS if k not in v]
        extra = sorted(set(v) - {"rope_type", *LLAMA3_ROPE_KEYS})
        if v.get("rope_type") != "llama3" or missing or extra:
            raise ValueError(
                f"training.model.rope_scaling: {v!r} is not supported; allowed: null, or rope_type 'llama3' "
                f"with {', '.join(LLAMA3_ROPE_KEYS)}"
            )
        return v

    @model_validator(mode="after")
    def _heads(self) -> ModelSize:
        if self.n_embd % self.n_head:
            raise ValueError(
                f"training.model.n_embd ({self.n_embd}) must be divisible by training.model.n_head ({self.n_head})"
            )
        if self.arch == "llama" and self.n_head % self.n_kv_head:
            raise ValueError(
                f"training.model.n_head ({self.n_head}) must be divisible by "
                f"training.model.n_kv_head ({self.n_kv_head})"
            )
        return self

    def architecture(self) -> dict:
        """The fields of the model's config (workloads.common.model.config_from_dict)."""
        if self.arch == "gpt":
            return {
                "arch": "gpt",
                "n_layer": self.n_layer,
                "n_head": self.n_head,
                "n_embd": self.n_embd,
                "block_size": self.block_size,
                "vocab_size": self.vocab_size,
                "dropout": self.dropout,
            }
        extra = {k: getattr(self, k) for k, v in _LLAMA_DEFAULTS.items() if getattr(self, k) != v}
        return {"arch": "llama", **{k: getattr(self, k) for k in _SHAPE}, **extra}

    def parameters(self) -> int:
        """Parameter count, from the shape (the same sums the model's modules make)."""
        d, layers, vocab = self.n_embd, self.n_layer, self.vocab_size
        if self.arch == "gpt":
            return vocab * d + self.block_size * d + layers * (12 * d * d + 13 * d) + 2 * d
        kv = self.n_kv_head * (d // self.n_head)
        per_layer = 2 * d * d + 2 * d * kv + 3 * d * self.ffn_hidden + 2 * d
        return 2 * vocab * d + layers * per_layer + d


def _absolute_or_s3(v: str | None) -> str | None:
    """``storage_path`` and ``data_path``: an absolute POSIX path or an s3:// URI."""
    if v is None:
        return v
    if "://" in v and not v.startswith("s3://"):
        raise ValueError(f"{v!r}: allowed are an absolute POSIX path or an s3://bucket/prefix URI")
    if "://" not in v and not v.startswith("/"):
        raise ValueError(f"{v!r} is not an absolute path; allowed: /fsx/..., another absolute path, or s3://")
    return v


class TrainLoop(Frozen):
    """The `training:` fields the train loop takes (workloads/training/job.py), typed, bounded,
    documented and checked once: ``Training`` (the whole section) extends it, and the job's
    ``JobSettings`` (config/job_settings.py) adds the values the cluster decides."""

    run_name: str = Field(
        default="gpt-bytes",
        description=(
            "Stable run name (1-63 lowercase letters, digits, hyphens); resubmitting with the same name resumes the run."
        ),
    )

    steps: int = Field(default=20000, ge=1, description="Optimizer steps of the whole run (not per attempt).")

    batch_size_per_worker: int = Field(
        default=16, ge=1, description=("Sequences per worker per step; the global batch is this times the workers.")
    )

    # The nanoGPT-style schedule.
    learning_rate: float = Field(
        default=3e-4, gt=0, le=1.0, description=("Peak AdamW learning rate; linear warmup, then cosine decay to 10 %.")
    )

    warmup_steps: int = Field(default=200, ge=0, description="Steps of linear learning-rate warmup.")

    weight_decay: float = Field(default=0.1, ge=0, description="AdamW weight decay.")

    grad_clip: float = Field(default=1.0, gt=0, description="Gradient-norm clipping threshold.")

    seed: int = Field(default=1234, description="Seed of the model init, data order and every rank's RNG.")

    # H100/H200/A10G/L40S all compute in bf16.
    precision: Literal["bf16", "fp32"] = Field(
        default="bf16",
        description=(
            "bf16 compute on GPUs with fp32 weights, optimizer state and gradient reduction; CPU runs use fp32."
        ),
    )

    sharding: Literal["fsdp", "ddp"] = Field(
        default="fsdp",
        description=(
            "fsdp: FSDP2 (fully_shard per decoder block), parameters, gradients and optimizer state sharded over "
            "all workers (2 or more); ddp: every worker holds the whole model (small models only)."
        ),
    )

    # true/false, this field's earlier values, still load: true is full, false none.
    activation_checkpointing: Literal["none", "selective", "full"] = Field(
        default="full",
        description=(
            "Recompute activations in the backward pass instead of keeping them. full: every decoder block "
            "keeps only its input and runs its forward twice (least memory); selective: only every "
            "activation_checkpointing_every-th block does (torchtitan's layer-wise selective option), the "
            "others keep everything; none: no recomputation (most memory, the fastest step). The sizing's "
            "memory estimate follows the choice. true and false (earlier values) mean full and none."
        ),
    )

    activation_checkpointing_every: int = Field(
        default=2,
        ge=1,
        le=128,
        description=(
            "With activation_checkpointing selective: recompute every n-th block (blocks 0, n, 2n, ...). "
            "2 (torchtitan's example) recomputes half the blocks; 1 is full."
        ),
    )

    compile: bool = Field(
        default=False,
        description=(
            "torch.compile each decoder block (inductor) before FSDP wraps it, torchtitan's order: fused "
            "kernels for norms, rotary embeddings and SwiGLU. The compile time (tens of seconds to minutes "
            "for 32 blocks, once per attempt) shows as compile= on the start-up line and counts as start-up "
            "in goodput. torchtitan's Llama 3 8B tables report +16 % throughput from compile over eager FSDP."
        ),
    )

    float8: bool = Field(
        default=False,
        description=(
            "Float8 training of the decoder blocks' linear layers (torchao convert_to_float8_training, "
            "tensorwise scaling) with float8 all-gather under FSDP2; the output layer stays bf16. Only "
            "on GPUs with FP8 Tensor Cores (H100, H200, L4, L40S, B200...: config/catalog.py "
            "GPU_HAS_FP8); rejected for others (A10G) when the config loads. Ignored on CPU workers."
        ),
    )

    global_batch_size: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Sequences per optimizer step over all workers, held when an elastic run resumes on fewer "
            "workers: each step accumulates global_batch_size / (workers x batch_size_per_worker) "
            "micro-batches, which must be a whole number at every worker count from min_workers to "
            "num_workers. The gradients are reduced once per step, on the last micro-batch: with fsdp each GPU "
            "holds the whole model's unsharded fp32 gradients while it accumulates (4 bytes per parameter; the "
            "memory estimate counts them). null: no accumulation; the global batch is batch_size_per_worker x "
            "workers."
        ),
    )

    # Defaults from the references: FSDP2's fully_shard(reshard_after_forward=True); torchtitan's
    # apply_fsdp (torchtitan/models/llama3/infra/parallelize.py, policy "default") reshards every
    # block but the last ("FSDP would prefetch it immediately"), as parallelize.shard_model does.
    # Prefetch: PyTorch's FSDP notes ("FSDP Prefetch Nuances": implicit forward prefetching is
    # always on) and pytorch/examples distributed/FSDP2 (--explicit-prefetch) for the explicit one.
    fsdp_reshard_after_forward: bool = Field(
        default=True,
        description=(
            "FSDP2 reshard_after_forward: free each block's gathered parameters after its forward and "
            "all-gather them again in backward (ZeRO-3: least memory, one more all-gather per block per "
            "step). false keeps them gathered from forward to backward (ZeRO-2: one block's full 16-bit "
            "parameters per block held, less communication). Default true, as FSDP2 and torchtitan."
        ),
    )

    fsdp_prefetch_blocks: int = Field(
        default=0,
        ge=0,
        le=8,
        description=(
            "Blocks whose all-gather FSDP2 issues ahead of time (set_modules_to_forward_prefetch and "
            "set_modules_to_backward_prefetch). 0: FSDP2's implicit prefetching (the next block's "
            "all-gather overlaps the current block's compute; FSDP2's and torchtitan's default); n: the "
            "next n blocks explicitly, hiding more communication behind compute at the cost of n more "
            "blocks of gathered parameters in memory."
        ),
    )

    # At ~0.2 s/step on GPUs, 500 steps bound the lost work to ~2 minutes.
    checkpoint_every_steps: int = Field(
        default=500,
        ge=1,
        description=("Steps between checkpoints; bounds the work redone after a failure. At most steps."),
    )

    # Each report is a barrier that can wait for the controller's poll, so not every step.
    report_every_steps: int = Field(default=50, ge=1, description="Steps between metrics reports to Ray Train.")

    num_to_keep: int = Field(
        default=3, ge=2, description=("Checkpoints kept; at least 2 so a torn newest one has a predecessor.")
    )

    # HyperPod replaces a failed node, but with max_failures=0 the run ends anyway.
    max_failures: int = Field(
        default=10,
        ge=-1,
        description=("Restarts of the worker group after failures before the run fails; -1: unlimited."),
    )

    # Ray Train ScalingConfig(num_workers=(min_workers, workers)); each resize is a restart from
    # the last checkpoint, and the global batch changes with the worker count (global_batch_size holds it).
    min_workers: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Elastic restarts: after a node loss the run waits up to replacement_wait_s for a replacement, "
            "then goes on with as few as this many workers, and grows back when nodes return. At most "
            "num_workers; null: a fixed worker count (the run waits for the replacement)."
        ),
    )

    # How long a new worker group waits for its placement group: Ray Train's
    # RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S (workloads/training/job.py controller_env).
    replacement_wait_s: int = Field(
        default=60,
        ge=5,
        le=3600,
        description=(
            "Seconds a restart after a node loss waits for its workers' resources (the lost node's "
            "replacement) before it tries again: an elastic run (min_workers) then continues on the "
            "workers the remaining nodes hold, a fixed-size run waits another round. HyperPod replaces "
            "a node in minutes: waiting longer idles the remaining GPUs, shrinking sooner costs a "
            "second restart (and up to checkpoint_every_steps redone steps) when the node returns."
        ),
    )

    deterministic: bool = Field(
        default=False,
        description=(
            "Deterministic kernels: torch.use_deterministic_algorithms (an op without a deterministic "
            "kernel raises), cuBLAS's fixed workspace, no cuDNN autotuning; costs step time on GPUs "
            "(docs/benchmarks.md). Off, a resume at the same world size is bitwise only on CPU with gloo; "
            "on GPUs it stays within a small tolerance of the uninterrupted run (atomics in backward "
            "passes, cuBLAS split-K and cuDNN autotuning vary in the last bits)."
        ),
    )

    gpus_per_worker: int = Field(
        default=1, ge=0, description=("GPUs per worker; must divide the GPUs of the group's instance type.")
    )

    storage_shared: bool = Field(
        default=False, description=("Declare a non-/fsx path as mounted on every node (e.g. NFS), for multi-node runs.")
    )

    data_path: str | None = Field(
        default=None,
        description=(
            "Training text, file or directory (absolute path or s3://); null: the Python standard library's "
            "sources in the image."
        ),
    )

    # Every worker holds the raw-text corpus in memory as int64 tokens (8 bytes per byte): 1 GiB of
    # text is 8 GiB per worker. Larger corpora are pre-tokenized (dataset_path), read from disk.
    data_max_bytes: int = Field(
        default=64 << 20,
        ge=1 << 16,
        le=1 << 30,
        description=(
            "Read at most this many bytes of the raw-text corpus (data_path; byte tokens only). Every worker "
            "holds it in memory as 8-byte tokens, so at most 1 GiB (1073741824); more text: pretokenize it "
            "and set dataset_path."
        ),
    )

    tokenizer: str = Field(
        default="bytes",
        description=(
            "'bytes' (UTF-8 bytes, 256 ids: the raw-text path, dev and rehearsals), or a Hugging Face "
            "tokenizer.json (absolute path or s3://). With dataset_path the job refuses a dataset tokenized "
            "with another tokenizer (the manifest's fingerprint); the raw-text path reads byte tokens only."
        ),
    )

    dataset_path: str | None = Field(
        default=None,
        description=(
            "A pre-tokenized dataset (workloads.common.token_shards: manifest.json, train/ and validation/ "
            "shards, as the pretokenize workload writes it) at an absolute path every node mounts (/fsx/...). "
            "Set: the job reads its train split instead of data_path (which must then be null) and evaluates on "
            "its validation split; null: the raw-text path (data_path, data_max_bytes, byte tokens). Checked "
            "before the first step: complete (manifest present), every shard's size, the shards' SHA-256 "
            "spread over the ranks, the tokenizer's fingerprint and vocabulary against tokenizer and "
            "model.vocab_size."
        ),
    )

    eval_every_steps: int = Field(
        default=0,
        ge=0,
        description=(
            "Steps between evaluations on held-out windows (validation loss, perplexity, bits per byte), and at "
            "the last step; 0: off. The same windows every time (the validation split in order, or the raw "
            "corpus's last windows), so values compare across resumes and world sizes."
        ),
    )

    eval_batches: int = Field(
        default=8,
        ge=1,
        le=10_000,
        description=(
            "Global batches (batch_size_per_worker x workers windows each) per evaluation, from the start of "
            "the held-out windows."
        ),
    )

    init_from: str | None = Field(
        default=None,
        description=(
            "A Hugging Face Llama folder (config.json and safetensors: a model downloaded or exported to "
            "FSx) whose weights a fresh run starts from instead of the seed's; an absolute path every "
            "node mounts (/fsx/...; S3 objects reach it through FSx's data repository association). "
            "Each worker reads only its own shard. Its shape must be training.model's (an HF preset: "
            "model: {preset: llama-3.1-8b}). A run that has checkpoints resumes from them and ignores "
            "it. null: weights drawn from the seed."
        ),
    )

    @field_validator("init_from")
    @classmethod
    def _init_from(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith("/"):
            raise ValueError(
                f"training.init_from: {v!r} is not an absolute path; allowed: a folder every node mounts "
                "(/fsx/..., where FSx's data repository association brings s3:// objects)"
            )
        return v

    export_path: str | None = Field(
        default=None,
        description=(
            "Where `hpray export` (the export workload) and export_at_end write the run's Hugging Face folder, "
            "the one the LLM service (inference.llm.model_source) serves: an absolute path every node mounts. "
            "null: <storage path>/<run_name>/export."
        ),
    )

    @field_validator("export_path")
    @classmethod
    def _export_path(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith("/"):
            raise ValueError(
                f"training.export_path: {v!r} is not an absolute path; allowed: a folder every node mounts (/fsx/...)"
            )
        return v

    export_at_end: bool = Field(
        default=False,
        description=(
            "At the run's last step, once its final checkpoint is written, rank 0 exports it to export_path "
            "(streamed one shard at a time, verified, replacing an earlier export) while the other workers "
            "wait; `hpray export` does the same on demand for any verified checkpoint."
        ),
    )

    def export_dir(self, storage_path: str) -> str:
        """Where the run's export goes: ``export_path``, or ``<storage_path>/<run_name>/export``."""
        return self.export_path or f"{storage_path.rstrip('/')}/{self.run_name}/export"

    @field_validator("run_name")
    @classmethod
    def _run_name(cls, v: str) -> str:
        if not RUN_NAME_RE.match(v):
            raise ValueError(
                f"{v!r} is not a valid run name; allowed: 1-63 lowercase letters, digits and "
                "hyphens, starting and ending with a letter or digit"
            )
        return v

    @field_validator("data_path")
    @classmethod
    def _data_path(cls, v: str | None) -> str | None:
        return _absolute_or_s3(v)

    @field_validator("tokenizer")
    @classmethod
    def _tokenizer(cls, v: str) -> str:
        if v == "bytes":
            return v
        try:
            return _absolute_or_s3(v) or v
        except ValueError as err:
            raise ValueError(f"{err}; or 'bytes'") from None

    @field_validator("dataset_path")
    @classmethod
    def _dataset_path(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith("/"):
            raise ValueError(
                f"{v!r}: the job reads shards with pread from a POSIX path; allowed: an absolute path every "
                "node mounts (/fsx/...), where the pretokenize workload writes"
            )
        return v

    @model_validator(mode="after")
    def _data_source(self) -> TrainLoop:
        if self.dataset_path is not None and self.data_path is not None:
            raise ValueError(
                f"training.data_path ({self.data_path!r}) and training.dataset_path ({self.dataset_path!r}) "
                "are both set; allowed: one of them (dataset_path: a pre-tokenized dataset, data_path: raw text "
                "as byte tokens)"
            )
        if self.dataset_path is None and self.tokenizer != "bytes":
            raise ValueError(
                f"training.tokenizer ({self.tokenizer!r}) needs training.dataset_path: the raw-text path "
                "(data_path) reads byte tokens; allowed: tokenizer 'bytes', or a dataset_path pretokenized "
                "with this tokenizer"
            )
        return self

    @field_validator("activation_checkpointing", mode="before")
    @classmethod
    def _ac_bool(cls, v):
        if isinstance(v, bool):  # the field's earlier values
            return "full" if v else "none"
        return v


class Training(TrainLoop):
    """The Ray Train job: model, optimisation, checkpointing, fault tolerance and placement."""

    model: ModelSize = Field(default_factory=ModelSize, description="The model architecture: a preset or its shape.")

    dataset_size_gib: float | None = Field(
        default=None,
        gt=0,
        description=(
            "Size of dataset_path's dataset on FSx in GiB, when it is not the pretokenize section's output "
            "(which declares its own); the FSx capacity check adds it to the checkpoints kept."
        ),
    )

    restart_seconds: int = Field(
        default=120,
        ge=0,
        description=(
            "Seconds the job takes to resume once its nodes are back (a new worker group, process groups, the "
            "first step), besides reading the checkpoint, which the sizing adds at FSx's throughput; for the "
            "goodput sweep. Default: 2 minutes."
        ),
    )

    instance_group: str | None = Field(
        default=None, description=("HyperPod instance group of the workers; null: the first GPU group.")
    )

    measured_mfu: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description=(
            "The model FLOPs utilisation a run of this job measured (its mfu metric: the Reporter's, on the "
            "training dashboard's Throughput panel), e.g. 0.42. The review's cost per million training tokens "
            "uses it; null: the assumed 36.5 % (sizing/training.py ASSUMED_MFU) before any run."
        ),
    )

    num_workers: int | None = Field(
        default=None,
        description=("Workers (at least 1); null: fill the group, one per gpus_per_worker GPUs on every node."),
    )

    # Every rank writes its own checkpoint shards (torch.distributed.checkpoint) there.
    storage_path: str | None = Field(
        default=None,
        description=(
            "Where Ray Train keeps the run: a POSIX path every node mounts (/fsx/..., or another absolute path "
            "with storage_shared); not s3://. null: /fsx + fsx.file_system_path, exported to the checkpoint bucket."
        ),
    )

    active_deadline_seconds: int = Field(
        default=3 * 24 * 3600,
        ge=60,
        description=("KubeRay stops the job after this long (RayJob activeDeadlineSeconds)."),
    )

    ttl_seconds_after_finished: int = Field(
        default=3600,
        ge=0,
        description=("Seconds a finished job's Ray head is kept for log collection (its workers go at once)."),
    )

    image: str | None = Field(
        default=None,
        description=(
            "Container image of the job; null: the workloads image `cdk deploy` builds from workloads/Dockerfile "
            "for this account and region. Set only to run another image built the same way."
        ),
    )

    @model_validator(mode="after")
    def _init_shape(self) -> Training:
        """A Hugging Face preset's shape is the folder's: fields declared next to it that differ
        cannot load its weights (a folder of another shape is found at start-up)."""
        if self.init_from is None:
            return self
        if self.model.arch != "llama":
            raise ValueError(
                f"training.init_from: {self.init_from!r} is a Llama folder, training.model.arch is "
                f"{self.model.arch!r}; allowed: 'llama'"
            )
        preset = HF_PRESETS.get(self.model.preset or "")
        if preset is None:
            return self
        for name in (*_SHAPE[:-1], *_LLAMA_DEFAULTS):
            if getattr(self.model, name) != preset[name]:
                raise ValueError(
                    f"training.model.{name}: {getattr(self.model, name)!r} declared next to preset "
                    f"{self.model.preset!r}, whose {name} is {preset[name]!r}; training.init_from "
                    f"({self.init_from}) holds the preset's shape; allowed: {preset[name]!r}"
                )
        return self

    @field_validator("num_workers")
    @classmethod
    def _workers(cls, v: int | None) -> int | None:
        if v is not None and v < 1:
            raise ValueError(f"{v} workers requested; a training run needs at least 1 worker")
        return v

    @field_validator("storage_path")
    @classmethod
    def _shard_storage(cls, v: str | None) -> str | None:
        if v is not None and v.startswith("s3://"):
            raise ValueError(
                f"{v!r}: every rank writes its checkpoint shards to storage_path directly, which "
                "needs a POSIX file system all nodes mount; allowed: /fsx/... (exported to S3 by "
                "the data repository association) or another shared absolute path"
            )
        return v

    @field_validator("storage_path")
    @classmethod
    def _storage(cls, v: str | None) -> str | None:
        return _absolute_or_s3(v)

    @model_validator(mode="after")
    def _elastic(self) -> Training:
        if self.min_workers is not None and self.num_workers is not None and self.min_workers > self.num_workers:
            raise ValueError(
                f"training.min_workers ({self.min_workers}) is more than training.num_workers "
                f"({self.num_workers}); allowed: 1-{self.num_workers}"
            )
        return self

    @model_validator(mode="after")
    def _cadence(self) -> Training:
        if self.checkpoint_every_steps > self.steps:
            raise ValueError(
                f"training.checkpoint_every_steps ({self.checkpoint_every_steps}) is larger than "
                f"training.steps ({self.steps}); no checkpoint would be taken before the end"
            )
        return self

    # Derived values ------------------------------------------------------------------------------

    def resolved_storage_path(self, fsx_file_system_path: str) -> str:
        return self.storage_path or f"/fsx{fsx_file_system_path}"

    def resolved_export_path(self, fsx_file_system_path: str) -> str:
        """Where the run's export goes: ``export_path``, or ``<storage>/<run_name>/export``."""
        return self.export_dir(self.resolved_storage_path(fsx_file_system_path))

    def group(self, groups: Sequence[InstanceGroup]) -> InstanceGroup | None:
        """The group ``instance_group`` names, or the first GPU group when it names none."""
        if self.instance_group is None:
            return default_gpu_group(groups)
        return next((g for g in groups if g.name == self.instance_group), None)

    def group_problems(self, groups: Sequence[InstanceGroup]) -> list[str]:
        """The group named here against ``groups`` (hyperpod.instance_groups) and its hardware
        facts: it exists, the catalog knows its GPUs, and ``gpus_per_worker`` divides them. How
        many workers fit is the plan's check (sizing/training.py)."""
        names = [g.name for g in groups]
        group = self.group(groups)
        if group is None:
            if self.instance_group is None:
                return [
                    "training.instance_group: no GPU instance group in hyperpod.instance_groups "
                    f"({', '.join(names)}); name the group the workers run on"
                ]
            return [
                f"training.instance_group: {self.instance_group!r} is not a HyperPod instance "
                f"group; known: {', '.join(names)}"
            ]
        try:
            spec = catalog.instance_spec(group.instance_type)
        except KeyError:
            return [
                f"training.instance_group: instance type {group.instance_type!r} of group "
                f"{group.name!r} has no hardware facts in config/catalog.py (GPUs, EFA); "
                "add them before training on it"
            ]
        if self.gpus_per_worker > spec.gpus:
            return [
                f"training.gpus_per_worker: {self.gpus_per_worker} GPUs per worker, but "
                f"{group.instance_type} (instance group {group.name!r}) has {spec.gpus}; "
                f"allowed: 0-{spec.gpus}"
            ]
        if self.gpus_per_worker and spec.gpus % self.gpus_per_worker:
            return [
                f"training.gpus_per_worker: {self.gpus_per_worker} does not divide the "
                f"{spec.gpus} GPUs of {group.instance_type}; allowed: a divisor of {spec.gpus}"
            ]
        if self.float8 and self.gpus_per_worker and not catalog.has_fp8(group.instance_type):
            return [
                f"training.float8: instance type {group.instance_type} of instance group {group.name!r} "
                f"has {spec.accelerator} GPUs, which have no FP8 Tensor Cores; allowed: float8 false, or a "
                f"group of {', '.join(sorted(catalog.GPU_HAS_FP8))} GPUs"
            ]
        return []


def accumulation_steps(t: TrainLoop, workers: int) -> int:
    """Micro-batches per optimizer step on ``workers`` workers: ``global_batch_size`` over the
    workers' batches (1 without it). ``batch_problems`` has checked that it divides."""
    if t.global_batch_size is None:
        return 1
    return max(1, t.global_batch_size // (workers * t.batch_size_per_worker))


def batch_problems(t: TrainLoop, workers: int, min_workers: int | None = None) -> list[str]:
    """``global_batch_size`` against every worker count an elastic run may resume on (``min_workers``
    to ``workers``): a whole number of micro-batches of ``batch_size_per_worker`` each."""
    if t.global_batch_size is None:
        return []
    counts = range(min_workers or workers, workers + 1)
    bad = [n for n in counts if t.global_batch_size % (n * t.batch_size_per_worker)]
    if not bad:
        return []
    return [
        f"training.global_batch_size: {t.global_batch_size} is not a multiple of workers x "
        f"batch_size_per_worker ({t.batch_size_per_worker}) at {', '.join(map(str, bad))} worker(s) "
        f"(the run may resume on {counts.start}-{workers}); allowed: a multiple of "
        f"{_lcm([n * t.batch_size_per_worker for n in counts])}, or null"
    ]


def _lcm(values: list[int]) -> int:
    return math.lcm(*values)


def sharding_problems(t: TrainLoop, workers: int) -> list[str]:
    """FSDP over one worker shards nothing: it is plain training with extra collectives. The plan
    checks the cluster's worker count (sizing/training.py), a local run its own."""
    if t.sharding == "fsdp" and workers < 2:
        return [
            f"training.sharding: 'fsdp' with {workers} worker shards nothing; allowed: 'ddp' "
            "with one worker, or 'fsdp' with 2 or more workers"
        ]
    return []
