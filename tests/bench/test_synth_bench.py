"""bench/synth_bench.py: its many-group configs are valid environments (the benchmark measured
nothing when the 100-group config failed to load)."""

from __future__ import annotations

import pytest

from bench.synth_bench import groups_config
from config import load_environment
from manifests.registry import plan_of


@pytest.mark.parametrize("n", [2, 100])
def test_the_n_group_config_loads_with_n_groups_and_a_placed_training_job(tmp_path, n):
    dev = load_environment("dev")
    groups_config(tmp_path, n)
    env = load_environment(f"groups{n}", tmp_path)
    groups = env.hyperpod.instance_groups
    assert len(groups) == n
    # dev's own groups unchanged, so its training job and services place as in dev.
    assert groups[: len(dev.hyperpod.instance_groups)] == dev.hyperpod.instance_groups
    assert len({g.name for g in groups}) == n
    plan = plan_of(env)
    assert plan.training is not None and plan.training.group.name == dev.training.instance_group


def test_fewer_groups_than_dev_has_is_refused(tmp_path):
    with pytest.raises(SystemExit, match=r"^instance groups: 0; dev\.yaml already has 1, allowed: 1 or more$"):
        groups_config(tmp_path, 0)
