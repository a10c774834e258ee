"""The pretokenize RayJob's command line, from the `pretokenize:` section: what
``python -m workloads.pretokenize`` takes (workloads/pretokenize/__main__.py), with the
tokenizer actors the plan sized (sizing/plan.py ``pretokenize_actors``) as ``--workers``."""

from __future__ import annotations

from config.environment import EnvironmentConfig
from sizing.plan import pretokenize_actors

MODULE = "workloads.pretokenize"


def args(env: EnvironmentConfig) -> list[str]:
    """The job's arguments; none where the config has no ``pretokenize:`` (the renderer then
    reports the plan's reason)."""
    p = env.pretokenize
    if p is None:
        return []
    out = [
        "--input",
        p.input,
        "--output",
        p.output,
        "--tokenizer",
        p.tokenizer,
        "--text-column",
        p.text_column,
        "--validation-fraction",
        repr(p.validation_fraction),
        "--shard-tokens",
        str(p.shard_tokens),
        "--workers",
        str(pretokenize_actors(env)),
        "--cpus-per-worker",
        str(p.cpus_per_worker),
    ]
    return out + (["--format", p.format] if p.format else [])
