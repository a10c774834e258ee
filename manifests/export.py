"""The export RayJob's arguments: ``python -m workloads.export`` over the training run of the
config (its storage path and run name: the run's newest verified checkpoint, or ``--step``), into
``training.export_path`` (default ``<storage>/<run_name>/export``), replacing an earlier export,
with the run's tokenizer (``training.tokenizer``: a tokenizer.json or the job's byte
tokens). ``hpray export`` renders it (ops/commands/export.py)."""

from __future__ import annotations

from typing import Any

from config.environment import EnvironmentConfig
from config.facts.names import EXPORT_APP
from manifests import rayjob
from sizing import plan as plan_mod
from sizing.plan import EXPORT, JobPlan, Unplanned

# The largest safetensors shard: what the export holds at once (with its sources and one
# converted tensor), so the entrypoint fits its head (sizing/plan.py EXPORT_HEAD).
MAX_SHARD_BYTES = 1 << 30


def tokenizer(env: EnvironmentConfig) -> str:
    """The run's tokenizer (``training.tokenizer``: a tokenizer.json, or "bytes")."""
    return env.training.tokenizer


def export_path(env: EnvironmentConfig) -> str:
    """Where the run's Hugging Face folder goes (the LLM service's model source)."""
    return env.training.resolved_export_path(env.fsx.file_system_path)


def arguments(env: EnvironmentConfig, step: int | None = None) -> list[str]:
    """``python -m workloads.export``'s arguments for the run of ``env`` (``step``: that
    checkpoint; None: the newest that verifies)."""
    t = env.training
    args = [
        "--storage",
        t.resolved_storage_path(env.fsx.file_system_path),
        "--run-name",
        t.run_name,
        "--out",
        export_path(env),
        "--tokenizer",
        tokenizer(env),
        "--max-shard-bytes",
        str(MAX_SHARD_BYTES),
        "--replace",
    ]
    return args if step is None else [*args, "--step", str(step)]


MODULE = "workloads.export"


def render(env: EnvironmentConfig, step: int | None = None) -> dict[str, Any]:
    """The export RayJob of ``env`` (``step``: that checkpoint of the run; None: the newest that
    verifies), from the registry's plan (raises ConfigError where it has none)."""
    # The registry's plan object (sizing.plan.workload_plan: one per config and plan function).
    plan = plan_mod.workload_plan(env, EXPORT, plan_mod.export)
    return rayjob.render_job(
        env,
        plan if isinstance(plan, JobPlan | Unplanned) else None,
        key=EXPORT,
        app=EXPORT_APP,
        module=MODULE,
        args=arguments(env, step),
    )
