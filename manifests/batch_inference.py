"""The batch inference RayJob (``batch_inference:``): ``python -m workloads.batch_inference`` with
its settings as JSON, on the whole nodes its plan sizes (sizing/plan.py ``batch_inference``).

The engine's settings are the keyword arguments of Ray's ``ray.data.llm.vLLMEngineProcessorConfig``
and are checked against that pydantic model itself (it forbids unknown fields), as the LLM
service's config is checked against Ray Serve LLM's models (manifests/inference.py)."""

from __future__ import annotations

import json
from typing import Any

from config import ConfigError
from config.environment import EnvironmentConfig
from config.facts.names import BATCH_INFERENCE_APP
from manifests import rayjob
from sizing import plan as plan_mod
from sizing.plan import BATCH_INFERENCE, JobPlan, Unplanned

MODULE = "workloads.batch_inference"


def processor(env: EnvironmentConfig) -> dict[str, Any]:
    """``vLLMEngineProcessorConfig``'s keyword arguments for ``env``'s batch_inference section."""
    b = env.batch_inference
    assert b is not None, "rendered only where batch_inference is configured"
    return {
        "model_source": env.batch_model_source(),
        "engine_kwargs": {
            "tensor_parallel_size": b.tensor_parallel_size,
            "max_model_len": b.max_model_len,
            "gpu_memory_utilization": b.gpu_memory_utilization,
        },
        "concurrency": b.engines,
        "batch_size": b.batch_size,
        # The prompts are text: no chat template; the engine tokenizes and detokenizes.
        "chat_template_stage": False,
        "task_type": "generate",
    }


def processor_problems(kwargs: dict[str, Any]) -> list[str]:
    """``kwargs`` against Ray's own ``vLLMEngineProcessorConfig`` (one line per problem)."""
    from pydantic import ValidationError
    from ray.data.llm import vLLMEngineProcessorConfig

    try:
        vLLMEngineProcessorConfig(**kwargs)
    except ValidationError as err:
        return [
            f"batch_inference: {'.'.join(str(p) for p in e['loc'])}: {e['msg']} (Ray's vLLMEngineProcessorConfig)"
            for e in err.errors()
        ]
    return []


def settings(env: EnvironmentConfig) -> dict[str, Any]:
    """What ``python -m workloads.batch_inference --config-json`` reads."""
    b = env.batch_inference
    assert b is not None, "rendered only where batch_inference is configured"
    return {
        "input_path": b.input_path,
        "input_format": b.input_format,
        "prompt_column": b.prompt_column,
        "output_path": b.output_path,
        "sampling": {"max_tokens": b.max_tokens, "temperature": b.temperature},
        "processor": processor(env),
    }


def render(env: EnvironmentConfig) -> dict[str, Any]:
    """The batch inference RayJob of ``env`` (ConfigError where it has no plan or its engine
    config is not Ray's)."""
    # The registry's plan object (sizing.plan.workload_plan: one per config and plan function).
    plan = plan_mod.workload_plan(env, BATCH_INFERENCE, plan_mod.batch_inference)
    if env.batch_inference is not None:
        problems = processor_problems(processor(env))
        if problems:
            raise ConfigError(f"{env.name}.yaml", problems)
    return rayjob.render_job(
        env,
        plan if isinstance(plan, JobPlan | Unplanned) else None,
        key=BATCH_INFERENCE,
        app=BATCH_INFERENCE_APP,
        module=MODULE,
        args=["--config-json", json.dumps(settings(env), sort_keys=True, separators=(",", ":"))]
        if env.batch_inference is not None
        else [],
    )
