"""The train loop's settings (``JobSettings``): the ``training:`` fields it takes, typed, bounded
and documented once in config/training.py, plus the values the cluster decides (workers, CPUs per
worker, storage path, placement strategy). The environment's plan builds them once
(sizing/plan.py), the RayJob carries them as JSON, the job parses them
(workloads/training/__main__.py). Apart from workloads/training/job.py, which imports this module
only inside ``train_func``, so that the step (``train_step`` and its helpers, which the GPU bench
runs on a machine without the config stack) imports no pydantic."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from config.training import Training

# The train loop's settings are these fields of the ``training:`` section, typed, bounded and
# documented once there (config/training.py), plus the values the cluster decides (``_RUNTIME``).
TRAINING_FIELDS = (
    "run_name",
    "steps",
    "gpus_per_worker",
    "batch_size_per_worker",
    "learning_rate",
    "warmup_steps",
    "weight_decay",
    "grad_clip",
    "seed",
    "precision",
    "sharding",
    "activation_checkpointing",
    "checkpoint_every_steps",
    "report_every_steps",
    "num_to_keep",
    "max_failures",
    "min_workers",
    "replacement_wait_s",
    "deterministic",
    "data_path",
    "data_max_bytes",
    "storage_shared",
)


class _Settings(BaseModel):
    # Frozen: the plan's settings are shared by every reader of the plan.
    model_config = ConfigDict(extra="forbid", frozen=True)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump()


_RUNTIME: dict[str, Any] = {
    # The resolved storage path, a POSIX path every node mounts.
    "storage_path": (str, Field(description="Where Ray Train keeps the run: a POSIX path every node mounts.")),
    "num_workers": (int, Field(ge=1, description="Ray Train workers (the plan's count on the cluster).")),
    # Whole CPUs on the cluster (the worker pod's CPUs shared by its workers); a share locally.
    "cpus_per_worker": (int | float, Field(gt=0, description="CPUs each Ray Train worker asks.")),
    "model": (dict, Field(description="workloads.common.model.config_from_dict fields (arch: llama or gpt).")),
    "placement_strategy": (
        Literal["SPREAD", "PACK"],
        Field(description="SPREAD places one worker per node where it can (as on the cluster); PACK fills nodes."),
    ),
    "log_every_step": (
        bool,
        Field(default=False, description="One progress line per step (rank 0) in the job log; rehearsals parse them."),
    ),
}

_FIELDS: dict[str, Any] = {
    **{name: (Training.model_fields[name].annotation, Training.model_fields[name]) for name in TRAINING_FIELDS},
    **_RUNTIME,
}

if TYPE_CHECKING:

    class JobSettings(_Settings):
        """What the type checker sees: the fields are made from ``_FIELDS`` when the module loads."""

        def __init__(self, **data: Any) -> None: ...

        def __getattr__(self, name: str) -> Any: ...

else:
    JobSettings = create_model(
        "JobSettings",
        __base__=_Settings,
        __doc__="Everything ``train_func`` needs, JSON-serializable (it travels as train_loop_config).",
        **_FIELDS,
    )


def job_settings(
    t: Training, *, storage_path: str, num_workers: int, cpus_per_worker: float, placement_strategy: str
) -> JobSettings:
    """``t``'s train-loop fields (``TRAINING_FIELDS``) and the runtime values."""
    return JobSettings(
        **t.model_dump(include=set(TRAINING_FIELDS)),
        storage_path=storage_path,
        num_workers=num_workers,
        cpus_per_worker=cpus_per_worker,
        model=t.model.architecture(),
        placement_strategy=placement_strategy,
    )
