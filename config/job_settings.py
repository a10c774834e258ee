"""The train loop's settings (``JobSettings``): the ``training:`` fields it takes, declared once
with their types, bounds, descriptions and checks in config/training.py (``TrainLoop``, which the
section's ``Training`` extends), plus the values the cluster decides (workers, CPUs per worker,
storage path, placement strategy). The environment's plan builds them once (sizing/plan.py), the
RayJob carries them as JSON, the job parses them (workloads/training/__main__.py). Apart from
workloads/training/job.py, which imports this module only inside ``train_func``, so that the step
(``train_step`` and its helpers, which the GPU bench runs on a machine without the config stack)
imports no pydantic."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from config.training import Training, TrainLoop

# The train loop's fields of the ``training:`` section (``TrainLoop``'s), in their order there.
TRAINING_FIELDS = tuple(TrainLoop.model_fields)


class JobSettings(TrainLoop):
    """Everything ``train_func`` needs, JSON-serializable (it travels as train_loop_config).
    Frozen: the plan's settings are shared by every reader of the plan."""

    # The resolved storage path, a POSIX path every node mounts.
    storage_path: str = Field(description="Where Ray Train keeps the run: a POSIX path every node mounts.")
    num_workers: int = Field(ge=1, description="Ray Train workers (the plan's count on the cluster).")
    # Whole CPUs on the cluster (the worker pod's CPUs shared by its workers); a share locally.
    cpus_per_worker: int | float = Field(gt=0, description="CPUs each Ray Train worker asks.")
    model: dict[str, Any] = Field(description="workloads.common.model.config_from_dict fields (arch: llama or gpt).")
    placement_strategy: Literal["SPREAD", "PACK"] = Field(
        description="SPREAD places one worker per node where it can (as on the cluster); PACK fills nodes."
    )
    log_every_step: bool = Field(
        default=False, description="One progress line per step (rank 0) in the job log; rehearsals parse them."
    )

    # From the plan (sizing/plan.py): the runtime cannot import sizing, so the figures the
    # Reporter's MFU divides by travel here. null: no figure (CPU workers, a chip without a peak).
    peak_tflops_per_gpu: float | None = Field(
        default=None, description="Dense bf16 peak of one GPU, TFLOP/s (config/catalog.py), for the job's MFU."
    )
    model_flops_per_token: float | None = Field(
        default=None, description="Training FLOPs per token of the model (sizing/training.py flops_per_token)."
    )

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump()


def job_settings(
    t: Training,
    *,
    storage_path: str,
    num_workers: int,
    cpus_per_worker: float,
    placement_strategy: Literal["SPREAD", "PACK"],
    peak_tflops_per_gpu: float | None = None,
    model_flops_per_token: float | None = None,
) -> JobSettings:
    """``t``'s train-loop fields (``TRAINING_FIELDS``) and the runtime values."""
    return JobSettings(
        **t.model_dump(include=set(TRAINING_FIELDS)),
        storage_path=storage_path,
        num_workers=num_workers,
        cpus_per_worker=cpus_per_worker,
        model=t.model.architecture(),
        placement_strategy=placement_strategy,
        peak_tflops_per_gpu=peak_tflops_per_gpu,
        model_flops_per_token=model_flops_per_token,
    )
