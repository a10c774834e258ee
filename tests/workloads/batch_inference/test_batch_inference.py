"""Batch inference (``batch_inference:``): the rows in and out of the vLLM engine stage (pure
functions, on CPU), the engine config checked against Ray's own ``vLLMEngineProcessorConfig``,
and the RayJob the plan sizes (whole nodes of the GPU group, a GPU bundle per engine rank)."""

from __future__ import annotations

import json
import shlex

import pytest

from config import ConfigError, load_environment
from manifests import batch_inference, registry
from sizing.plan import JobPlan
from workloads.batch_inference.__main__ import OUTPUT_COLUMNS, postprocess, preprocess


def _with_batch(name: str, **fields):
    env = load_environment(name)
    data = env.model_dump()
    data["batch_inference"] = {"input_path": "s3://prompts/in/", "output_path": "/fsx/batch/out", **fields}
    return type(env).model_validate(data)


def test_preprocess_takes_the_prompt_column_and_the_sampling():
    row = {"id": 3, "question": "What is FSx?"}
    out = preprocess(row, prompt_column="question", sampling={"max_tokens": 8, "temperature": 0.0})
    assert out == {"prompt": "What is FSx?", "sampling_params": {"max_tokens": 8, "temperature": 0.0}}
    with pytest.raises(KeyError) as err:
        preprocess(row, prompt_column="prompt", sampling={})
    assert err.value.args[0] == (
        "batch_inference.prompt_column: 'prompt' is not a column of the input; columns: ['id', 'question']"
    )


def test_postprocess_keeps_the_output_columns():
    row = {"prompt": "p", "generated_text": "g", "num_input_tokens": 2, "num_generated_tokens": 5, "extra": 1}
    assert postprocess(row) == {"prompt": "p", "generated_text": "g", "num_input_tokens": 2, "num_generated_tokens": 5}
    assert tuple(postprocess(row)) == OUTPUT_COLUMNS


def test_the_engine_config_is_rays_and_generates_with_the_training_export():
    env = _with_batch("prod", engines=2, tensor_parallel_size=2, batch_size=16)
    kwargs = batch_inference.processor(env)
    assert kwargs["model_source"] == env.training_export_locations()[0]
    assert kwargs["concurrency"] == 2 and kwargs["engine_kwargs"]["tensor_parallel_size"] == 2
    assert batch_inference.processor_problems(kwargs) == []
    assert batch_inference.processor_problems({**kwargs, "engine": "vLLM"}) == [
        "batch_inference: engine: Extra inputs are not permitted (Ray's vLLMEngineProcessorConfig)"
    ]


def test_the_rayjob_runs_the_module_with_its_settings_on_the_nodes_the_plan_sizes():
    env = _with_batch("prod", instance_group="serve-g6e", engines=3, tensor_parallel_size=2)
    plan = registry.plan_of(env).workloads["batch-inference"]
    # 3 engines of 2 GPUs on 4-GPU nodes: 2 whole nodes; each engine a bundle per GPU.
    assert isinstance(plan, JobPlan) and plan.worker.max_replicas == 2
    (demand,) = plan.demands
    assert (demand.count, demand.bundles) == (3, ({"GPU": 1.0}, {"GPU": 1.0}))
    job = batch_inference.render(env)
    args = shlex.split(job["spec"]["entrypoint"])
    assert args[:4] == ["python", "-m", "workloads.batch_inference", "--config-json"]
    settings = json.loads(args[4])
    assert settings == batch_inference.settings(env)
    assert settings["input_path"] == "s3://prompts/in/" and settings["output_path"] == "/fsx/batch/out"
    assert job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["maxReplicas"] == 2


def test_absent_is_not_deployed_and_a_too_wide_engine_is_named():
    assert "batch-inference" not in registry.plan_of(load_environment("prod")).workloads
    env = _with_batch("prod", instance_group="serve-g6e", tensor_parallel_size=8)
    with pytest.raises(ConfigError) as err:
        batch_inference.render(env)
    assert err.value.errors == [
        "batch_inference.tensor_parallel_size: 8 GPUs per engine, but ml.g6e.12xlarge (instance group "
        "'serve-g6e') has 4; allowed: 1-4"
    ]


def test_locations_are_fsx_or_s3():
    with pytest.raises(ValueError) as err:
        _with_batch("dev", input_path="prompts.parquet")
    assert (
        "batch_inference.input_path: 'prompts.parquet' is not a location; allowed: an absolute path (/fsx/...) or s3://"
        in str(err.value)
    )
