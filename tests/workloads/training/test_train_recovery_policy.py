"""training.replacement_wait_s: how long a restart after a node loss waits for the replacement
before an elastic run continues on fewer workers, wired to Ray Train's own setting."""

from __future__ import annotations

import json
import shlex

import pytest
import yaml

from config import ConfigError, parse_environment
from config.loader import CONFIG_DIR
from manifests import training as manifest
from manifests.training import render
from workloads.training import settings as S
from workloads.training.job import WORKER_GROUP_START_TIMEOUT_ENV, controller_env


def _dev(**training):
    data = yaml.safe_load((CONFIG_DIR / "dev.yaml").read_text())
    data["name"] = "dev"
    data["training"] = {**data.get("training", {}), **training}
    return data


def test_the_wait_is_ray_trains_worker_group_start_timeout():
    """The variable is the one Ray Train's worker group reads, and Ray propagates it from the
    driver (where ``run`` sets it) to the controller that starts the worker groups."""
    from ray.train.v2._internal import constants

    assert constants.WORKER_GROUP_START_TIMEOUT_S_ENV_VAR == WORKER_GROUP_START_TIMEOUT_ENV
    assert WORKER_GROUP_START_TIMEOUT_ENV in constants.ENV_VARS_TO_PROPAGATE
    # The documented default is Ray's own: the config changes nothing unless it is set.
    assert constants.DEFAULT_WORKER_GROUP_START_TIMEOUT_S == 60.0


def test_default_and_configured_wait_reach_the_controller_and_the_rayjob():
    s = manifest.for_cluster(parse_environment(_dev(), source="dev.yaml"))
    assert controller_env(s) == {"RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S": "60"}
    cfg = parse_environment(_dev(replacement_wait_s=300, min_workers=1), source="dev.yaml")
    assert controller_env(manifest.for_cluster(cfg)) == {"RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S": "300"}
    settings = json.loads(shlex.split(render(cfg)["spec"]["entrypoint"])[-1])
    assert (settings["replacement_wait_s"], settings["min_workers"]) == (300, 1)
    local = S.for_local({"replacement_wait_s": 5}, storage_path="/tmp/unused")
    assert controller_env(local) == {"RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S": "5"}


@pytest.mark.parametrize("value", [0, 4, 3601])
def test_out_of_range_wait(value):
    with pytest.raises(ConfigError) as err:
        parse_environment(_dev(replacement_wait_s=value), source="dev.yaml")
    bound = "greater than or equal to 5" if value < 5 else "less than or equal to 3600"
    assert err.value.errors == [f"training.replacement_wait_s: Input should be {bound} (given: {value})"]


def test_run_starts_ray_train_with_the_wait_in_the_drivers_environment(monkeypatch, tmp_path):
    """``run`` sets the wait where Ray Train's trainer reads what it hands its controller."""
    import os

    import ray.train.torch

    from workloads.training import job

    seen = {}

    class Trainer:
        def __init__(self, *args, **kwargs):
            seen["env"] = os.environ.get(WORKER_GROUP_START_TIMEOUT_ENV)
            seen["num_workers"] = kwargs["scaling_config"].num_workers

        def fit(self):
            return "result"

    monkeypatch.setattr(ray.train.torch, "TorchTrainer", Trainer)
    monkeypatch.delenv(WORKER_GROUP_START_TIMEOUT_ENV, raising=False)
    s = S.for_local({"replacement_wait_s": 42, "min_workers": 1}, storage_path=str(tmp_path))
    assert job.run(s) == "result"
    assert seen == {"env": "42", "num_workers": (1, 2)}
