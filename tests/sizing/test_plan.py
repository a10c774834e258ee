"""The environment's plan (sizing/plan.py): derived once per loaded config, and what the
manifests, policies, flow table, submitted jobs and the placement table render is read from it."""

from __future__ import annotations

import pytest

from config import known_environments, load_environment
from manifests import registry
from manifests.check import load_checked
from sizing import plan as plan_mod


@pytest.fixture
def derivations(monkeypatch):
    """Counts the plan's derivations (sizing.plan.derive) from here on."""
    calls: list[str] = []
    real = plan_mod.derive

    def counting(env, *args):
        calls.append(env.name)
        return real(env, *args)

    monkeypatch.setattr(plan_mod, "derive", counting)
    return calls


@pytest.fixture
def computations(monkeypatch):
    """Counts every computation that sizes a workload, by name, wherever it comes from: the
    training job's placement (each ``TrainingPlacement`` built), its train-loop settings (each
    ``JobSettings`` built) and the worker pods of sizing.pods."""
    from config.job_settings import JobSettings
    from sizing import pods
    from sizing.training import TrainingPlacement

    counts: dict[str, int] = {}

    def counted(owner, attr, name):
        real = getattr(owner, attr)

        def wrapper(*args, **kwargs):
            counts[name] = counts.get(name, 0) + 1
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, attr, wrapper)

    counted(TrainingPlacement, "__init__", "placement")
    counted(JobSettings, "__init__", "settings")
    for name in ("training_worker", "serve_worker", "llm_worker", "job_worker"):
        counted(pods, name, name)
    return counts


@pytest.mark.parametrize("name", known_environments())
def test_rendering_every_manifest_derives_the_plan_once(name, derivations, computations):
    from constructs.flow_table import flow_table
    from manifests import inference as inference
    from manifests import network_policy
    from manifests import training as training
    from ops.submit import job as job_submit
    from sizing import placement, pods

    env = load_checked(name)  # the entry points check the plan: the one derivation
    assert derivations == [name]
    training.render(env)
    training.for_cluster(env)  # `python -m manifests train --env`: the plan's settings
    inference.render(env)
    if env.inference.llm.enabled:
        inference.render_llm(env)
    network_policy.render(env)
    flow_table(env)
    placement.render_table(env, plan=registry.plan_of(env))
    p = job_submit.placement(env, instance_group=None, gpus=None, nodes=1)
    job_submit.render_job(env, name="count", command=["python", "t.py"], working_dir_uri="s3://b/k.zip", p=p)
    assert derivations == [name]
    # Each workload sized once: the training job, each service, one node per GPU group for jobs.
    gpu_groups = [g for g in env.hyperpod.instance_groups if g.is_gpu and pods.known(g)]
    assert computations == {
        "placement": 1,
        "settings": 1,
        "training_worker": 1,
        "serve_worker": 1,
        **({"llm_worker": 1} if env.inference.llm.enabled else {}),
        # and the export's worker group (no pods: its head runs it), sized on the training group,
        # and the batch-inference job's whole nodes where the environment deploys it.
        **({"job_worker": len(gpu_groups) + 1 + (env.batch_inference is not None)} if gpu_groups else {}),
    }


def test_another_config_is_another_plan(derivations):
    """A config is frozen: one with overrides (``hpray``'s --set, say) is a new object, planned anew."""
    from manifests import training as manifest

    dev = load_environment("dev")
    registry.plan_of(dev)
    assert derivations == ["dev"]
    # The renderer reads the training job's plan of that derivation, not another one.
    assert manifest.for_cluster(dev) is registry.plan_of(dev).training.settings
    assert derivations == ["dev"]
    s = manifest.for_cluster(dev, {"num_workers": 2})
    assert s.num_workers == 2 and s is not registry.plan_of(dev).training.settings
    assert registry.plan_of(dev).training is not None
    assert registry.plan_of(dev).training.placement.workers != 2 or dev.training.num_workers == 2


def test_the_plan_holds_each_workloads_group_and_pod_shape():
    dev = load_environment("dev")
    plan = registry.plan_of(dev)
    assert plan is registry.plan_of(dev)
    t = plan.training
    assert t is not None and t.name == f"train-{dev.training.run_name}"
    assert t.group is dev.hyperpod.group(t.placement.group)
    assert t.worker.min_replicas == t.worker.max_replicas == t.placement.nodes
    assert t.worker.gpus == min(t.placement.workers, t.placement.workers_per_node) * dev.training.gpus_per_worker
    assert t.settings.cpus_per_worker == max(1, t.worker.cpus // t.worker.per_pod)
    assert t.settings.storage_path == dev.training.resolved_storage_path(dev.fsx.file_system_path)
    assert plan.serve is not None and plan.serve.name == f"{dev.name_prefix}-{dev.inference.app_name}"
    assert (plan.llm is not None) == dev.inference.llm.enabled
    for group, shape in plan.job_workers.items():
        assert shape.group == group and shape.min_replicas == shape.max_replicas == 1
        assert plan.job_worker(group, 3).max_replicas == 3


@pytest.mark.parametrize("name", known_environments())
def test_the_rayjob_passes_the_plans_train_loop_settings_as_they_are(name):
    """The train loop's settings are built once, in the plan: `python -m workloads.training
    --env` reads them there, the RayJob carries them as JSON, and the job parses back the same
    settings (workers, CPUs, storage path and strategy included)."""
    import shlex

    from manifests import training as manifest
    from workloads.training.__main__ import settings_from_args

    env = load_environment(name)
    t = registry.plan_of(env).training
    assert t is not None
    assert manifest.for_cluster(env) is t.settings
    assert t.settings.num_workers == t.placement.workers
    assert t.settings.placement_strategy == ("SPREAD" if t.placement.nodes > 1 else "PACK")
    entrypoint = manifest.render(env)["spec"]["entrypoint"]
    parsed = settings_from_args(["--settings-json", shlex.split(entrypoint)[-1]])
    assert parsed == t.settings and parsed.to_dict() == t.settings.to_dict()


def test_the_plans_settings_cannot_be_changed_by_a_reader():
    """Every reader of the plan shares its settings: they are frozen."""
    from pydantic import ValidationError

    t = registry.plan_of(load_environment("dev")).training
    assert t is not None
    with pytest.raises(ValidationError, match="frozen"):
        t.settings.num_workers = 1
