"""config/inference.py: defaults, capacity checks against the HyperPod groups, exact messages."""

from __future__ import annotations

import pytest

from config import load_environment, parse_environment
from tests.config.config_data import config_errors, env_data


def _errors(env: str, inference: dict) -> list[str]:
    return config_errors(env, lambda d: d.setdefault("inference", {}).update(inference))


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_every_environment_resolves_a_gpu_group(env):
    cfg = load_environment(env)
    group = cfg.inference.resolved_instance_group(cfg.hyperpod)
    assert group.is_gpu
    assert cfg.inference.check_against(cfg.hyperpod) == []


def test_prod_serves_on_the_serve_group_with_the_llm_beside_it():
    cfg = load_environment("prod")
    assert cfg.inference.resolved_instance_group(cfg.hyperpod).name == "serve-g6e"
    assert cfg.inference.llm.enabled
    assert cfg.inference.resolved_llm_group(cfg.hyperpod).name == "serve-g6e"


def test_unknown_instance_group():
    assert _errors("dev", {"instance_group": "nope"}) == [
        "inference.instance_group: no HyperPod instance group named 'nope'; known: gpu-workers"
    ]


def test_more_gpus_per_replica_than_the_instance_has():
    assert _errors("dev", {"gpus_per_replica": 8}) == [
        "inference.gpus_per_replica: 8 GPUs per replica but ml.g5.12xlarge (group 'gpu-workers') has 4"
    ]


def test_new_cluster_upgrade_needs_twice_the_gpus():
    errors = _errors("dev", {"autoscaling": {"min_replicas": 1, "max_replicas": 5}})
    assert errors == [
        "inference.upgrade_strategy: 'NewCluster' starts a second Ray cluster beside the running "
        "one, so 5 replicas need 10 GPUs during an upgrade but group 'gpu-workers' has 8 "
        "(ray-project/kuberay#1476); lower inference.autoscaling.max_replicas, add nodes, or "
        "choose 'None' (in-place Serve updates only) or 'NewClusterWithIncrementalUpgrade'"
    ]
    # The same replicas fit when upgrades do not start a second cluster.
    data = env_data("dev")
    data["inference"].update(autoscaling={"min_replicas": 1, "max_replicas": 5}, upgrade_strategy="None")
    parse_environment(data)


def test_more_replicas_than_the_group_holds():
    assert _errors("dev", {"upgrade_strategy": "None", "autoscaling": {"max_replicas": 9}}) == [
        "inference.autoscaling.max_replicas: 9 replicas need 9 GPUs but group 'gpu-workers' has 8 (2 x 4)"
    ]


def test_max_ongoing_requests_below_batch_size():
    errors = _errors("dev", {"max_batch_size": 64, "max_ongoing_requests": 32})
    assert errors[0] == (
        "inference.max_ongoing_requests (32) must be >= inference.max_batch_size (64): a replica "
        "never holds more requests than max_ongoing_requests, so larger batches could never form"
    )


def test_autoscaling_target_must_be_reachable():
    assert _errors("dev", {"autoscaling": {"target_ongoing_requests": 40}}) == [
        "inference.autoscaling.target_ongoing_requests (40) must be below "
        "inference.max_ongoing_requests (32): a replica never holds more, so autoscaling would "
        "never see it overloaded"
    ]


def test_min_above_max_replicas():
    assert _errors("dev", {"autoscaling": {"min_replicas": 3, "max_replicas": 2}}) == [
        "inference.autoscaling: min_replicas (3) must be <= max_replicas (2)"
    ]


def test_bad_storage_and_run_name():
    errors = _errors("dev", {"storage_path": "fsx/ckpt", "run_name": "-bad"})
    assert (
        "inference.run_name: '-bad' is not a run name; allowed: 1-128 alphanumerics, '_', '.', '-', starting with an alphanumeric"
        in errors
    )
    assert (
        "inference.storage_path: 'fsx/ckpt' is not a checkpoint storage location: expected an absolute path (FSx: /fsx/...) or an s3://bucket/prefix URI"
        in errors
    )


def test_unknown_upgrade_strategy_lists_the_allowed():
    (err,) = _errors("dev", {"upgrade_strategy": "BlueGreen"})
    assert err.startswith(
        "inference.upgrade_strategy: Input should be 'NewCluster', "
        "'NewClusterWithIncrementalUpgrade' or 'None' (given: 'BlueGreen')"
    )


def test_llm_on_a_group_too_small():
    errors = _errors(
        "prod",
        {
            "llm": {
                "enabled": True,
                "tensor_parallel_size": 4,
                "max_replicas": 2,
                "model_source": "/fsx/models/x",
                "external_model": True,
            }
        },
    )
    assert errors == [
        "inference.llm.max_replicas: 2 engines of 4 GPU(s) (x2 during a NewCluster upgrade) plus 4 "
        "GPUs of the generation service exceed group 'serve-g6e' (2 x 4 GPUs)"
    ]


def test_llm_model_source_must_be_fsx_or_s3():
    (err,) = _errors("prod", {"llm": {"enabled": True, "model_source": "meta-llama/Llama-3-8B"}})
    assert err == (
        "inference.llm.model_source: 'meta-llama/Llama-3-8B' is not a model location: "
        "expected an absolute path (FSx: /fsx/...) or an s3://bucket/prefix URI"
    )


def test_the_llm_service_serves_the_training_runs_export_or_a_declared_external_model():
    """The chain from training to serving, at synth: prod's LLM service serves its training run's
    export (training.export_path, here through the data repository association's S3 copy)."""
    prod = load_environment("prod")
    assert prod.inference.llm.model_source == prod.training_export_locations()[1]
    assert prod.training_export_locations()[0] == prod.training.resolved_export_path(prod.fsx.file_system_path)
    (err,) = _errors("prod", {"llm": {"enabled": True, "model_source": "/fsx/models/other"}})
    assert err == (
        "inference.llm.model_source: '/fsx/models/other' is not the export of training run 'llama-7b-fineweb' "
        "(training.export_path); allowed: '/fsx/checkpoints/models/llama-7b-fineweb' or "
        "'s3://hpray-prod-checkpoints-333333333333-us-east-1/checkpoints/models/llama-7b-fineweb', or "
        "inference.llm.external_model: true for a model this environment does not train"
    )

    def llm(**fields):
        data = prod.model_dump()
        data["inference"]["llm"] = {**data["inference"]["llm"], **fields}
        return type(prod).model_validate(data).inference.llm

    assert llm(model_source="/fsx/checkpoints/models/llama-7b-fineweb/").model_source.endswith("/")
    assert llm(model_source="/fsx/models/other", external_model=True).external_model


def test_gpu_dtype_defaults_to_bfloat16_and_lists_the_allowed():
    assert load_environment("prod").inference.gpu_dtype == "bfloat16"
    (err,) = _errors("dev", {"gpu_dtype": "float16"})
    assert err.startswith("inference.gpu_dtype: Input should be 'bfloat16' or 'float32' (given: 'float16')")
