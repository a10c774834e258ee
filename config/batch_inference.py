"""The `batch_inference:` section: a RayJob that generates over a batch of prompts with vLLM
(``ray.data.llm``), from Parquet or JSON lines on FSx or in S3 to Parquet (owned by the batch
inference workload, workloads/batch_inference). Absent: not deployed.

The engine's settings map onto Ray's own ``vLLMEngineProcessorConfig`` (manifests/batch_inference.py
checks the rendered config against that pydantic model); the engines' GPUs are placed and
autoscaling-checked by the plan (sizing/plan.py ``batch_inference``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from config.base import Frozen


def _location(v: str, field: str) -> str:
    if not v.startswith(("/", "s3://")):
        raise ValueError(
            f"batch_inference.{field}: {v!r} is not a location; allowed: an absolute path (/fsx/...) or s3://"
        )
    return v


class BatchInference(Frozen):
    """Prompts in, generations out, with the engines on one GPU group."""

    input_path: str = Field(description="The prompts: a file or folder on FSx (/fsx/...) or in S3 (s3://...).")
    input_format: Literal["parquet", "json"] = Field(
        default="parquet", description="parquet, or json (JSON lines, one object a line)."
    )
    prompt_column: str = Field(
        default="prompt", min_length=1, description="The column (or JSON key) of each prompt's text."
    )
    output_path: str = Field(
        description="Where the Parquet files go (FSx or S3): prompt, generated_text, token counts."
    )
    model_source: str | None = Field(
        default=None,
        description=(
            "The Hugging Face folder to generate with (FSx or S3); null: the training run's export "
            "(training.export_path, what `hpray export` writes)."
        ),
    )
    instance_group: str | None = Field(
        default=None, description="HyperPod instance group of the engines; null: the first GPU group."
    )
    engines: int = Field(default=1, ge=1, le=64, description="vLLM engines (Ray Data actors), each on its own GPUs.")
    tensor_parallel_size: int = Field(default=1, ge=1, le=8, description="GPUs per engine.")
    batch_size: int = Field(default=32, ge=1, le=4096, description="Prompts per batch sent to an engine.")
    max_model_len: int = Field(default=4096, ge=128, le=1_048_576, description="Context length of each engine.")
    gpu_memory_utilization: float = Field(default=0.9, gt=0.1, le=0.98, description="vLLM's share of GPU memory.")
    max_tokens: int = Field(default=256, ge=1, le=65536, description="Tokens generated per prompt at most.")
    temperature: float = Field(default=0.0, ge=0.0, le=2.0, description="Sampling temperature; 0: greedy.")

    @field_validator("input_path")
    @classmethod
    def _input(cls, v: str) -> str:
        return _location(v, "input_path")

    @field_validator("output_path")
    @classmethod
    def _output(cls, v: str) -> str:
        return _location(v, "output_path")

    @field_validator("model_source")
    @classmethod
    def _model(cls, v: str | None) -> str | None:
        return None if v is None else _location(v, "model_source")
