"""The `training:` section: the Ray Train job (owned by the training workload).

Worker and GPU counts are derived from the HyperPod instance group named here, the same group
the CDK app creates, so the job cannot ask for hardware the cluster does not have. The checks
against the groups (``Training.problems``) run when the job is derived from the config
(``workloads.training.settings.for_cluster``: rendering the RayJob, starting the job), before
anything starts.
"""

from __future__ import annotations

import math
import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from config import catalog
from config.base import Frozen

RUN_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class ModelSize(Frozen):
    """The GPT architecture (workloads.common.model.GPTConfig)."""

    # GPT-2 small shape (about 85M non-embedding parameters): big enough that a GPU is needed,
    # small enough to fit any HyperPod GPU with plain DDP.
    n_layer: int = Field(default=12, ge=1, le=96)
    n_head: int = Field(default=12, ge=1, le=128)
    n_embd: int = Field(default=768, ge=8, le=16384)
    # Context length in byte tokens.
    block_size: int = Field(default=512, ge=8, le=8192)
    # No dropout: the corpus is large relative to the step budget, and it keeps runs reproducible.
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0)

    @model_validator(mode="after")
    def _heads(self) -> "ModelSize":
        if self.n_embd % self.n_head:
            raise ValueError(
                f"training.model.n_embd ({self.n_embd}) must be divisible by "
                f"training.model.n_head ({self.n_head})"
            )
        return self


class Training(Frozen):
    """The Ray Train job: model, optimisation, checkpointing, fault tolerance and placement."""

    # Stable run name: resubmitting the job with the same name resumes the same run.
    run_name: str = "gpt-bytes"
    model: ModelSize = Field(default_factory=ModelSize)
    # Optimizer steps of the whole run (not per attempt).
    steps: int = Field(default=20000, ge=1)
    # Sequences per worker per step; the global batch is this times the worker count.
    batch_size_per_worker: int = Field(default=16, ge=1)
    # AdamW with linear warmup then cosine decay to 10 % (the nanoGPT-style schedule).
    learning_rate: float = Field(default=3e-4, gt=0, le=1.0)
    warmup_steps: int = Field(default=200, ge=0)
    weight_decay: float = Field(default=0.1, ge=0)
    grad_clip: float = Field(default=1.0, gt=0)
    seed: int = 1234
    # bf16 autocast on GPUs (H100/H200/A10G/L40S all support it); CPU runs use fp32.
    precision: Literal["bf16", "fp32"] = "bf16"
    # A checkpoint every 500 steps: at ~0.2 s/step on GPUs that bounds lost work to ~2 minutes.
    checkpoint_every_steps: int = Field(default=500, ge=1)
    # Metrics to Ray every 50 steps: each report is a barrier that can wait for the
    # controller's poll (RAY_TRAIN_HEALTH_CHECK_INTERVAL_S), so not every step.
    report_every_steps: int = Field(default=50, ge=1)
    # Three kept: the newest can be torn by a crash mid-upload and we fall back to the previous.
    num_to_keep: int = Field(default=3, ge=2)
    # Retries of the whole worker group after a failure; HyperPod replaces a failed node, but
    # with max_failures=0 the run ends anyway. -1: unlimited.
    max_failures: int = Field(default=10, ge=-1)
    # The HyperPod instance group the workers run on (None: the first GPU group).
    instance_group: str | None = None
    # None: fill the group, one worker per `gpus_per_worker` GPUs on every instance.
    num_workers: int | None = Field(default=None)
    gpus_per_worker: int = Field(default=1, ge=0)
    # Where Ray Train keeps the run: a shared POSIX path (/fsx/...) or s3://bucket/prefix.
    # None: FSx at /fsx + fsx.file_system_path, which the data repository association exports
    # to the checkpoint bucket.
    storage_path: str | None = None
    # A non-/fsx POSIX path that every node nonetheless sees (e.g. an NFS mount).
    storage_shared: bool = False
    # Training text (file or directory, POSIX path or s3://). None: the Python standard
    # library's own source files, present in every image, so nothing is downloaded.
    data_path: str | None = None
    # Read at most this much of the corpus (bytes).
    data_max_bytes: int = Field(default=64 << 20, ge=1 << 16)
    # KubeRay stops the job after this long (RayJob activeDeadlineSeconds): 3 days.
    active_deadline_seconds: int = Field(default=3 * 24 * 3600, ge=60)
    # Submitter-pod retries (RayJob submitterConfig.backoffLimit): transient API errors only;
    # training failures are retried by Ray Train itself (max_failures).
    submitter_backoff_limit: int = Field(default=2, ge=0, le=10)
    # Keep the finished cluster an hour for log collection (ttlSecondsAfterFinished).
    ttl_seconds_after_finished: int = Field(default=3600, ge=0)
    # None: the workloads image `cdk deploy` builds from workloads/Dockerfile for this account
    # and region (workloads.common.image). Set only to run another image built the same way.
    image: str | None = None

    @field_validator("run_name")
    @classmethod
    def _run_name(cls, v: str) -> str:
        if not RUN_NAME_RE.match(v):
            raise ValueError(
                f"{v!r} is not a valid run name; allowed: 1-63 lowercase letters, digits and "
                "hyphens, starting and ending with a letter or digit"
            )
        return v

    @field_validator("num_workers")
    @classmethod
    def _workers(cls, v: int | None) -> int | None:
        if v is not None and v < 1:
            raise ValueError(f"{v} workers requested; a training run needs at least 1 worker")
        return v

    @field_validator("storage_path", "data_path")
    @classmethod
    def _storage(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if "://" in v and not v.startswith("s3://"):
            raise ValueError(f"{v!r}: allowed are an absolute POSIX path or an s3://bucket/prefix URI")
        if "://" not in v and not v.startswith("/"):
            raise ValueError(f"{v!r} is not an absolute path; allowed: /fsx/..., another absolute path, or s3://")
        return v

    @model_validator(mode="after")
    def _cadence(self) -> "Training":
        if self.checkpoint_every_steps > self.steps:
            raise ValueError(
                f"training.checkpoint_every_steps ({self.checkpoint_every_steps}) is larger than "
                f"training.steps ({self.steps}); no checkpoint would be taken before the end"
            )
        return self

    # Derived values, checked against the HyperPod groups ---------------------------------------

    def resolved_storage_path(self, fsx_file_system_path: str) -> str:
        return self.storage_path or f"/fsx{fsx_file_system_path}"

    def placement(self, groups) -> "Placement":
        """Workers, nodes and GPUs for the instance groups ``groups`` (hyperpod.instance_groups);
        raises ValueError naming the field when they do not fit."""
        problems = self.problems(groups)
        if problems:
            raise ValueError("\n".join(problems))
        return self._placement(groups)

    def _group(self, groups):
        if self.instance_group is None:
            return next((g for g in groups if g.instance_type in catalog.gpu_instance_types()), None)
        return next((g for g in groups if g.name == self.instance_group), None)

    def _placement(self, groups) -> "Placement":
        group = self._group(groups)
        spec = catalog.instance_spec(group.instance_type)
        per_node = spec.gpus // self.gpus_per_worker if self.gpus_per_worker else 1
        workers = self.num_workers or per_node * group.instance_count
        nodes = math.ceil(workers / per_node)
        return Placement(group=group.name, instance_type=group.instance_type, workers=workers,
                         nodes=nodes, workers_per_node=per_node,
                         gpus_per_worker=self.gpus_per_worker, gpus_per_node=spec.gpus,
                         efa_interfaces=spec.efa_interfaces, vcpus=spec.vcpus,
                         memory_gib=spec.memory_gib)

    def problems(self, groups, *, fsx_file_system_path: str = "/checkpoints") -> list[str]:
        """Every mismatch between this section and the instance groups, one line each."""
        names = [g.name for g in groups]
        group = self._group(groups)
        if group is None:
            if self.instance_group is None:
                return ["training.instance_group: no GPU instance group in hyperpod.instance_groups "
                        f"({', '.join(names)}); name the group the workers run on"]
            return [f"training.instance_group: {self.instance_group!r} is not a HyperPod instance "
                    f"group; known: {', '.join(names)}"]
        try:
            spec = catalog.instance_spec(group.instance_type)
        except KeyError:
            return [f"training.instance_group: instance type {group.instance_type!r} of group "
                    f"{group.name!r} has no hardware facts in config/catalog.py (GPUs, EFA); "
                    "add them before training on it"]
        out: list[str] = []
        if self.gpus_per_worker > spec.gpus:
            out.append(
                f"training.gpus_per_worker: {self.gpus_per_worker} GPUs per worker, but "
                f"{group.instance_type} (instance group {group.name!r}) has {spec.gpus}; "
                f"allowed: 0-{spec.gpus}"
            )
            return out
        if self.gpus_per_worker and spec.gpus % self.gpus_per_worker:
            out.append(
                f"training.gpus_per_worker: {self.gpus_per_worker} does not divide the "
                f"{spec.gpus} GPUs of {group.instance_type}; allowed: a divisor of {spec.gpus}"
            )
            return out
        p = self._placement(groups)
        if p.nodes > group.instance_count:
            out.append(
                f"training.num_workers: {p.workers} workers need {p.nodes} {group.instance_type} "
                f"instances ({p.workers_per_node} per instance), but instance group "
                f"{group.name!r} has {group.instance_count}"
            )
        storage = self.resolved_storage_path(fsx_file_system_path)
        shared = storage.startswith("s3://") or storage == "/fsx" or storage.startswith("/fsx/")
        if p.nodes > 1 and not (shared or self.storage_shared):
            out.append(
                f"training.storage_path: {storage!r} is local to each node, but the workers "
                f"span {p.nodes} nodes; use a path on FSx (/fsx/...) or s3://, or set "
                "training.storage_shared if every node mounts it"
            )
        return out


class Placement(Frozen):
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
