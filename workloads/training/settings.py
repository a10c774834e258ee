"""The job's ``JobSettings`` for ``python -m workloads.training``: the command line's overrides
and, locally, the tiny model on CPU workers. On the cluster they are the plan's (sizing/plan.py
builds them once per config, with command-line overrides a new config): deploy-time code, in
manifests/training.py (``for_cluster``; ``python -m manifests train``).

Bad input is reported as ``ConfigError`` (each line names the field, the value, what is
allowed) before any Ray process starts.
"""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import ValidationError

from config import ConfigError
from config.job_settings import JobSettings, job_settings
from config.loader import format_validation_error
from config.training import Training, batch_problems, sharding_problems

# The `training:` values of a run on one machine (validated as a Training section, like the
# cluster's): the tiny preset (~0.13M parameters), a step in tens of milliseconds on a CPU core,
# loss visibly falling within a few hundred steps.
LOCAL_DEFAULTS: dict[str, Any] = {
    "model": {"preset": "tiny"},
    "activation_checkpointing": False,
    "steps": 300,
    "batch_size_per_worker": 8,
    "warmup_steps": 20,
    "learning_rate": 3e-3,
    "checkpoint_every_steps": 50,
    "report_every_steps": 10,
    "num_to_keep": 3,
    "max_failures": 3,
    "num_workers": 2,
    "gpus_per_worker": 0,
    "precision": "fp32",
    "data_max_bytes": 4 << 20,
}


# Local runs report faster than Ray's 2 s Train controller poll, which would pace them (docs/benchmarks.md).
LOCAL_RAY_ENV: dict[str, str] = {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.5"}


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """``key=value`` pairs (values parsed as YAML scalars; dotted keys for nesting: model.n_layer=4)."""
    out: dict[str, Any] = {}
    errors = []
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            errors.append(f"--set {pair!r}: expected KEY=VALUE, e.g. --set steps=200")
            continue
        value = yaml.safe_load(raw) if raw else None
        target = out
        *parents, leaf = key.split(".")
        for p in parents:
            target = target.setdefault(p, {})
        target[leaf] = value
    if errors:
        raise ConfigError("command line", errors)
    return out


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for k, v in extra.items():
        merged[k] = _merge(merged[k], v) if isinstance(v, dict) and isinstance(merged.get(k), dict) else v
    return merged


def training_with(base: Training, overrides: dict[str, Any], source: str) -> Training:
    data = _merge(base.model_dump(), overrides)
    if "preset" in overrides.get("model", {}):
        # A new preset replaces the base's shape; only the fields given next to it override it.
        data["model"] = overrides["model"]
    try:
        return Training.model_validate(data)
    except ValidationError as err:
        lines = format_validation_error(err)
        raise ConfigError(
            source, [line if line.startswith("training.") else f"training.{line}" for line in lines]
        ) from None


# JobSettings fields that are not part of the `training:` config, settable on local runs.
RUNTIME_KEYS = ("cpus_per_worker", "log_every_step", "placement_strategy")


def for_local(overrides: dict[str, Any] | None = None, *, storage_path: str) -> JobSettings:
    """Settings for a run on a local Ray cluster: the tiny model, CPU workers."""
    overrides = dict(overrides or {})
    runtime = {k: overrides.pop(k) for k in RUNTIME_KEYS if k in overrides}
    merged = _merge(LOCAL_DEFAULTS, {"storage_path": storage_path, **overrides})
    try:
        base = Training(storage_path=storage_path, checkpoint_every_steps=1)
    except ValidationError as err:  # a bad --storage: the same clear message as for the rest
        raise ConfigError("local run", [f"training.{line}" for line in format_validation_error(err)]) from None
    t = training_with(base, merged, "local run")
    if t.gpus_per_worker:
        raise ConfigError(
            "local run", [f"training.gpus_per_worker: {t.gpus_per_worker}; local runs are CPU-only, allowed: 0"]
        )
    workers = t.num_workers or 2
    problems = sharding_problems(t, workers) + batch_problems(t, workers, t.min_workers)
    if problems:
        raise ConfigError("local run", problems)
    assert t.storage_path is not None, "for_local sets storage_path"
    s = job_settings(
        t, storage_path=t.storage_path, num_workers=workers, cpus_per_worker=1.0, placement_strategy="SPREAD"
    )
    return s.model_copy(update=runtime)
