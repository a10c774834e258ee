"""The one RayJob builder: the training job and a user's job (``submit job``) both go through it."""

from __future__ import annotations

import pytest

from config import load_environment
from config.facts.jobs import JOBS_WORKLOAD
from manifests import crd, rayjob
from manifests import training as training
from ops.submit import job as js


@pytest.fixture(scope="module")
def dev():
    return load_environment("dev")


def test_both_renderers_build_their_rayjob_with_the_one_builder(dev, monkeypatch):
    calls = []
    real = rayjob.ray_job

    def recording(**kwargs):
        calls.append(kwargs["workload"])
        return real(**kwargs)

    monkeypatch.setattr(rayjob, "ray_job", recording)
    training.render(dev)
    p = js.placement(dev, instance_group=None, gpus=None, nodes=None)
    js.render_job(dev, name="my-job", command=["python", "x.py"], working_dir_uri="s3://b/k.zip", p=p, image="img:1")
    assert calls == [f"train-{dev.training.run_name}", JOBS_WORKLOAD]


def test_staged_cleanup_by_default_whole_cluster_when_suspendable(dev):
    head = {"template": {"spec": {"containers": []}}}
    common = {
        "metadata": {"name": "x", "namespace": "ray-workloads"},
        "entrypoint": "python x.py",
        "runtime_env_yaml": "{}",
        "head": head,
        "workers": [],
        "workload": "x",
        "token_auth": False,
        "active_deadline_s": 60,
        "ttl_s": 30,
    }
    staged = rayjob.ray_job(**common)["spec"]
    assert "shutdownAfterJobFinishes" not in staged
    assert staged["deletionStrategy"]["deletionRules"][1] == {
        "policy": "DeleteCluster",
        "condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": 30},
    }
    whole = rayjob.ray_job(**common, suspendable=True)["spec"]
    assert "deletionStrategy" not in whole
    assert (whole["shutdownAfterJobFinishes"], whole["ttlSecondsAfterFinished"]) == (True, 30)
    for spec in (staged, whole):
        assert (spec["submissionMode"], spec["backoffLimit"], spec["preRunningDeadlineSeconds"]) == (
            "HTTPMode",
            0,
            rayjob.PRE_RUNNING_DEADLINE_S,
        )


def test_rendered_jobs_are_valid_for_kuberay(dev):
    p = js.placement(dev, instance_group=None, gpus=None, nodes=None)
    user_job = js.render_job(dev, name="my-job", command=["python", "x.py"], working_dir_uri="s3://b/k.zip", p=p)
    assert crd.validate(training.render(dev)) == []
    assert crd.validate(user_job) == []
