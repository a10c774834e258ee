"""Bad input is a clear error naming the field, the value and what is allowed, before Ray starts."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from config import ConfigError, parse_environment
from config.loader import CONFIG_DIR
from manifests import training as manifest
from workloads.training import settings as S
from workloads.training.__main__ import main


def _dev(**training):
    data = yaml.safe_load((CONFIG_DIR / "dev.yaml").read_text())
    data["name"] = "dev"
    data["training"] = {**data.get("training", {}), **training}
    return data


def _errors(data):
    """Errors from loading the config or, for checks against the HyperPod groups, from
    deriving the job (what `render` and the job's entrypoint do before anything starts)."""
    with pytest.raises(ConfigError) as err:
        manifest.for_cluster(parse_environment(data, source="dev.yaml"))
    return err.value.errors


def test_zero_workers():
    assert _errors(_dev(num_workers=0)) == [
        "training.num_workers: 0 workers requested; a training run needs at least 1 worker"
    ]


def test_more_gpus_per_worker_than_the_instance_has():
    assert _errors(_dev(gpus_per_worker=5)) == [
        "training.gpus_per_worker: 5 GPUs per worker, but ml.g5.12xlarge (instance group "
        "'gpu-workers') has 4; allowed: 0-4"
    ]


def test_more_workers_than_the_group_holds():
    assert _errors(_dev(num_workers=9)) == [
        "training.num_workers: 9 workers need 3 ml.g5.12xlarge instances (4 per instance), but "
        "instance group 'gpu-workers' has 2"
    ]


def test_node_local_storage_with_workers_on_several_nodes():
    # Dev trains on one node (num_workers: 2, sharing its group with serving); eight span two.
    assert _errors(_dev(storage_path="/var/tmp/ckpt", num_workers=8)) == [
        "training.storage_path: '/var/tmp/ckpt' is local to each node, but the workers span 2 "
        "nodes; use a path on FSx (/fsx/...) or s3://, or set training.storage_shared if every "
        "node mounts it"
    ]
    # One node: a local path is fine.
    manifest.for_cluster(parse_environment(_dev(storage_path="/var/tmp/ckpt", num_workers=2), source="dev.yaml"))


def test_unknown_instance_type():
    data = _dev()
    data["hyperpod"]["instance_groups"][0]["instance_type"] = "ml.g5.12xlarg"
    (err,) = _errors(data)
    assert err.startswith(
        "hyperpod.instance_groups[0].instance_type: 'ml.g5.12xlarg' is not a HyperPod instance type (botocore "
    )
    assert err.endswith("did you mean 'ml.g5.12xlarge'?")


def test_unknown_instance_group():
    assert _errors(_dev(instance_group="gpu-wrokers")) == [
        "training.instance_group: 'gpu-wrokers' is not a HyperPod instance group; known: gpu-workers"
    ]


def test_unknown_training_key():
    assert _errors(_dev(stpes=10)) == ["training.stpes: unknown key 'stpes'; did you mean 'steps'?"]


def test_several_errors_at_once():
    errors = _errors(_dev(num_workers=0, checkpoint_every_steps=0, run_name="Bad_Name"))
    assert len(errors) == 3


def test_cli_reports_before_ray_starts(capsys, monkeypatch):
    import ray

    def no_ray(*a, **k):
        raise AssertionError("ray.init was called for invalid input")

    monkeypatch.setattr(ray, "init", no_ray)
    # An environment's placement is the deploy-time side's (the plan): `python -m manifests train`.
    from manifests.__main__ import main as manifests_main

    assert manifests_main(["train", "--env", "dev", "--set", "gpus_per_worker=5"]) == 2
    assert "training.gpus_per_worker: 5 GPUs per worker" in capsys.readouterr().err
    assert main(["--local", "--storage", "/tmp/x", "--set", "num_workers=0"]) == 2
    assert "local run: 1 configuration error:\n  - training.num_workers: 0 workers requested" in capsys.readouterr().err
    assert main(["--local", "--storage", "/tmp/x", "--set", "gpus_per_worker=1"]) == 2
    assert "local runs are CPU-only, allowed: 0" in capsys.readouterr().err
    assert main(["--local", "--storage", "relative/dir"]) == 2
    assert (
        "local run: 1 configuration error:\n  - training.storage_path: 'relative/dir' is not an absolute "
        "path; allowed: /fsx/..., another absolute path, or s3://"
    ) in capsys.readouterr().err


def test_cli_subprocess_exit_code_and_no_traceback():
    out = subprocess.run(
        [sys.executable, "-m", "manifests", "train", "--env", "prod", "--set", "gpus_per_worker=9"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert (
        "training.gpus_per_worker: 9 GPUs per worker, but ml.p5.48xlarge (instance group 'train-p5') has 8"
        in out.stderr
    )


def test_cluster_settings_follow_the_group():
    cfg = parse_environment(_dev(), source="dev.yaml")
    s = manifest.for_cluster(cfg)
    # Two of the group's eight GPUs: dev shares gpu-workers with serving (config/dev.yaml).
    assert (s.num_workers, s.gpus_per_worker, s.placement_strategy, s.storage_path) == (
        2,
        1,
        "PACK",
        "/fsx/checkpoints",
    )
    assert manifest.for_cluster(cfg, {"num_workers": 8}).placement_strategy == "SPREAD"


def test_preset_that_does_not_fit_the_gpu_memory():
    # Dev trains on two of the group's A10G (config/dev.yaml).
    assert _errors(_dev(model={"preset": "llama-11b"})) == [
        "training.model: llama-11b (11.01B parameters) needs about 101.3 GiB per GPU with fsdp over "
        "2 workers (batch_size_per_worker 16, block_size 2048, activation_checkpointing full), but "
        "ml.g5.12xlarge has 24 GiB per A10G (85% usable: 20.4 GiB); allowed: a smaller preset, more "
        "workers with fsdp, a smaller batch"
    ]
    # Sharded over all eight GPUs of the group it still does not fit.
    assert _errors(_dev(model={"preset": "llama-11b"}, num_workers=8)) == [
        "training.model: llama-11b (11.01B parameters) needs about 39.8 GiB per GPU with fsdp over "
        "8 workers (batch_size_per_worker 16, block_size 2048, activation_checkpointing full), but "
        "ml.g5.12xlarge has 24 GiB per A10G (85% usable: 20.4 GiB); allowed: a smaller preset, more "
        "workers with fsdp, a smaller batch"
    ]
    # A smaller preset fits dev's two GPUs.
    manifest.for_cluster(parse_environment(_dev(model={"preset": "llama-1b"}), source="dev.yaml"))


def test_fsdp_with_one_worker_shards_nothing():
    expected = [
        "training.sharding: 'fsdp' with 1 worker shards nothing; allowed: 'ddp' with one "
        "worker, or 'fsdp' with 2 or more workers"
    ]
    assert _errors(_dev(num_workers=1)) == expected
    with pytest.raises(ConfigError) as err:
        S.for_local({"num_workers": 1}, storage_path="/tmp/unused")
    assert err.value.errors == expected
    assert S.for_local({"num_workers": 1, "sharding": "ddp"}, storage_path="/tmp/unused").num_workers == 1


def test_s3_storage_is_refused_for_sharded_checkpoints():
    assert _errors(_dev(storage_path="s3://bucket/runs")) == [
        "training.storage_path: 's3://bucket/runs': every rank writes its checkpoint shards to "
        "storage_path directly, which needs a POSIX file system all nodes mount; allowed: /fsx/... "
        "(exported to S3 by the data repository association) or another shared absolute path"
    ]


def test_unknown_preset():
    assert _errors(_dev(model={"preset": "llama-2b"})) == [
        "training.model.preset: 'llama-2b' is not a preset; allowed: tiny, llama-76m, llama-1b, "
        "llama-3b, llama-7b, llama-11b, llama-3.2-1b, llama-3.2-3b, llama-3.1-8b"
    ]


def test_prod_trains_the_7b_preset_sharded_within_the_h100s():
    from config import load_environment
    from config.catalog import instance_spec
    from sizing.training import GPU_MEMORY_USABLE, memory_per_gpu

    cfg = load_environment("prod")
    s = manifest.for_cluster(cfg)
    assert s.sharding == "fsdp" and s.num_workers == 32 and s.model["n_embd"] == 4096
    need = sum(memory_per_gpu(cfg.training, 32).values())
    assert need < GPU_MEMORY_USABLE * instance_spec("ml.p5.48xlarge").gpu_memory_gib * (1 << 30)


# Training fields the train loop does not take as they are: the model's shape (it takes the
# architecture), the group and worker count and the storage path (it takes the plan's resolved
# values), and what only the RayJob reads.
NOT_TRAIN_LOOP_FIELDS = {
    "model",
    "dataset_size_gib",
    "restart_seconds",
    "instance_group",
    "num_workers",
    "storage_path",
    "image",
    "active_deadline_seconds",
    "ttl_seconds_after_finished",
    "measured_mfu",
}


def test_the_job_settings_are_the_training_fields_plus_the_runtime_values():
    """JobSettings is derived from the Training model: each of its training fields has the
    section's type and bounds, and a new `training:` option is either taken by the train loop
    or named here as one it does not take."""
    from config.job_settings import TRAINING_FIELDS, JobSettings
    from config.training import Training

    assert set(Training.model_fields) == set(TRAINING_FIELDS) | NOT_TRAIN_LOOP_FIELDS
    for name in TRAINING_FIELDS:
        assert JobSettings.model_fields[name].annotation == Training.model_fields[name].annotation, name
        assert JobSettings.model_fields[name].metadata == Training.model_fields[name].metadata, name
    runtime = set(JobSettings.model_fields) - set(TRAINING_FIELDS)
    assert runtime == {
        "storage_path",
        "num_workers",
        "cpus_per_worker",
        "model",
        "placement_strategy",
        "log_every_step",
        "peak_tflops_per_gpu",
        "model_flops_per_token",
    }
    cfg = parse_environment(_dev(), source="dev.yaml")
    s = manifest.for_cluster(cfg)
    assert {n: getattr(s, n) for n in TRAINING_FIELDS} == cfg.training.model_dump(include=set(TRAINING_FIELDS))
    with pytest.raises(ValueError, match="num_to_keep"):
        JobSettings(**{**s.to_dict(), "num_to_keep": 1})
