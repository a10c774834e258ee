"""The `pretokenize:` section: the pre-tokenization RayJob (workloads/pretokenize), which turns
raw documents (Parquet, JSON Lines or text, in S3 or on FSx) into the token dataset the training
job reads (``training.dataset_path``). Absent: not deployed.

Its pods: ``nodes`` worker pods of ``cpus`` CPUs each on ``instance_group`` (null: the first
group without GPUs, else the default GPU group: the tokenizer needs no GPU, so its pods ask for
none), placed and autoscaling-checked by the plan (sizing/plan.py ``pretokenize``) like every
pod; its S3 input is readable by the workloads role (constructs/flows.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field, field_validator

from config.base import Frozen
from config.hyperpod import InstanceGroup, default_gpu_group

# The token dataset's manifest format (workloads/common/token_shards.py writes it; hpray submit
# training reads it in the checkpoint bucket's copy before it submits).
TOKEN_SHARDS_FORMAT = "hpray-token-shards"


class Pretokenize(Frozen):
    """Raw documents → token shards and a manifest on FSx (workloads/common/token_shards.py)."""

    input: str = Field(
        description=(
            "The raw documents: an s3://bucket/prefix (read by the workloads role) or an absolute path "
            "on FSx (/fsx/...); a file or every file under it."
        )
    )
    format: Literal["parquet", "jsonl", "text"] | None = Field(
        default=None, description="Input format; null: by each file's extension."
    )
    text_column: str = Field(default="text", min_length=1, description="The text field of Parquet or JSON Lines rows.")
    output: str = Field(
        description=(
            "The dataset directory on FSx (/fsx/...): manifest.json (written last), train/ and validation/ "
            "shards. training.dataset_path names it to train on it."
        )
    )
    tokenizer: str = Field(
        description=(
            "A Hugging Face tokenizer.json (absolute path or s3://), or 'bytes'; the same as training.tokenizer "
            "when training reads the output (the job checks the manifest's fingerprint)."
        )
    )
    validation_fraction: float = Field(
        default=0.01, ge=0.0, lt=0.5, description="Share of documents (hashed by content) in the validation split."
    )
    shard_tokens: int = Field(
        default=1 << 26, ge=1024, le=1 << 31, description="Tokens per shard file (default 2**26)."
    )
    dataset_size_gib: float = Field(
        gt=0,
        description=(
            "The output's size on FSx in GiB (tokens x 2 bytes below 65536 ids, x 4 above), declared: the FSx "
            "capacity check adds it to the training checkpoints kept."
        ),
    )
    instance_group: str | None = Field(
        default=None,
        description=(
            "HyperPod instance group of its worker pods; null: the first group without GPUs, else the first GPU "
            "group (its pods ask for no GPU)."
        ),
    )
    nodes: int = Field(default=1, ge=1, le=64, description="Worker pods, one per node.")
    cpus: int = Field(
        default=8, ge=1, le=192, description="CPUs of each worker pod (tokenizer actors of cpus_per_worker each)."
    )
    cpus_per_worker: int = Field(
        default=1, ge=1, le=64, description="CPUs (tokenizer threads) of each tokenizer actor; at most cpus."
    )

    @field_validator("input")
    @classmethod
    def _input(cls, v: str) -> str:
        if v.startswith(("s3://", "/")):
            return v
        raise ValueError(f"{v!r}: allowed an s3://bucket/prefix URI or an absolute path (/fsx/...)")

    @field_validator("tokenizer")
    @classmethod
    def _tokenizer(cls, v: str) -> str:
        if v == "bytes" or v.startswith(("s3://", "/")):
            return v
        raise ValueError(f"{v!r}: allowed 'bytes', an s3://bucket/key URI or an absolute path of a tokenizer.json")

    @field_validator("output")
    @classmethod
    def _output(cls, v: str) -> str:
        if not (v == "/fsx" or v.startswith("/fsx/")):
            raise ValueError(
                f"{v!r}: the training workers read the shards by offset from the shared file system; "
                "allowed: a path under /fsx/"
            )
        return v

    def group(self, groups: Sequence[InstanceGroup]) -> InstanceGroup | None:
        if self.instance_group is not None:
            return next((g for g in groups if g.name == self.instance_group), None)
        return next((g for g in groups if not g.is_gpu), None) or default_gpu_group(groups)
