"""The registry of workloads (manifests/registry.py): the plan, the renderers, the NetworkPolicies,
the placement and autoscaling checks and the review all read it, so a workload registered there
is seen everywhere with no other edit."""

from __future__ import annotations

import contextlib
import io

import pytest
import yaml

from config import load_environment
from manifests import check, crd, disruption_budgets, network_policy, registry
from sizing import placement
from sizing import plan as plan_mod
from sizing.plan import JobPlan, ServicePlan, Unplanned

ENVS = ("dev", "staging", "prod")


@pytest.fixture
def smoke():
    """A small extra RayJob in a temporary registry: one whole node of the default GPU group,
    running ``python -m workloads.smoke``; the registry is the built-in one again after the test."""
    w = registry.rayjob(
        "smoke",
        plan_mod.whole_node_job("smoke-test", nodes=1),
        app="smoke",
        module="workloads.smoke",
        title="smoke test",
    )
    with registry.registered(w):
        yield w
    assert registry.workloads() == registry.WORKLOADS


def test_a_renderer_reads_its_own_workload_plan_from_the_registrys_plan():
    """The built-in workloads in the registry's order; a renderer that needs only its own
    workload's plan (manifests/training.py, manifests/inference.py) gets the very object of the
    registry's plan, and the checks over that plan pass."""
    from manifests import training

    assert [w.key for w in registry.WORKLOADS] == [
        "training",
        "inference",
        "inference-llm",
        "export",
        "batch-inference",
        "pretokenize",
    ]
    env = load_environment("dev")
    assert training.training_plan(env) is registry.plan_of(env).training
    assert plan_mod.workload_plan(env, "training", registry.get("training").plan) is registry.plan_of(env).training
    assert check.problems(env) == []


@pytest.mark.parametrize("name", ENVS)
def test_each_workload_has_its_kind_and_name_in_the_plan_and_its_manifest(name):
    env = load_environment(name)
    plan = registry.plan_of(env)
    for w, k8s_name in registry.deployed(env):
        p = plan.workloads[w.key]
        assert p.kind == w.kind and p.name == k8s_name
        manifest = w.render(env)
        assert manifest["kind"] == w.kind and manifest["metadata"]["name"] == k8s_name
        assert manifest["metadata"]["labels"]["app.kubernetes.io/name"] == w.app
        assert (w.serves is not None) == (w.kind == "RayService")


def test_what_the_generation_service_serves_is_what_its_serve_config_and_demands_name():
    from manifests import serve_config

    serves = registry.get("inference").serves
    assert serves is not None and serves.deployment == serve_config.DEPLOYMENT
    plan = registry.plan_of(load_environment("prod"))
    assert plan.serve is not None and plan.serve.demands[0].who == f"deployment {serves.deployment}"
    policies = {p["metadata"]["name"]: p["spec"] for p in network_policy.render(load_environment("prod"))["items"]}
    (rule,) = policies[f"{plan.serve.name}-serve-ingress"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": serves.port}]
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": {serves.clients_label: "true"}}}]


def test_a_service_without_a_plan_keeps_the_reason_and_the_manifest_reports_it():
    from config import ConfigError
    from manifests import inference

    dev = load_environment("dev")
    hyperpod = dev.hyperpod.model_copy(
        update={"instance_groups": [g for g in dev.hyperpod.instance_groups if not g.is_gpu]}
    )
    env = dev.model_copy(update={"hyperpod": hyperpod})
    reason = registry.plan_of(env).workloads["inference"]
    assert isinstance(reason, Unplanned) and reason.problems == (
        "inference.instance_group: no GPU instance group in hyperpod.instance_groups; set inference.instance_group",
    )
    with pytest.raises(ConfigError) as err:
        inference.render(env)
    assert err.value.errors == list(reason.problems)


def test_a_registered_workload_is_planned_rendered_policed_placed_and_reviewed(smoke, monkeypatch):
    from manifests.__main__ import main
    from ops.submit import render as ops_render
    from review.document import Document
    from review.placement import placement_section

    env = load_environment("dev")
    plan = registry.plan_of(env)
    # The plan: its own entry, after the built-in ones, and those unchanged.
    assert list(plan.workloads)[-1] == "smoke"
    job = plan.workloads["smoke"]
    assert isinstance(job, JobPlan) and job.name == "smoke-test" and job.worker.max_replicas == 1
    assert isinstance(plan.serve, ServicePlan) and plan.training is not None
    # Its manifest: `python -m manifests render smoke` and `hpray submit`'s seam, valid for KubeRay.
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["render", "smoke", "--env", "dev"]) == 0
    manifest = yaml.safe_load(out.getvalue())
    assert manifest == ops_render.render("smoke", env) == smoke.render(env)
    assert manifest["kind"] == "RayJob" and manifest["metadata"]["name"] == "smoke-test"
    assert manifest["spec"]["entrypoint"] == "python -m workloads.smoke"
    assert crd.validate(manifest) == []
    # `hpray submit smoke --dry-run` checks the environment with it (no client made): dev's two GPU
    # nodes are full without it, so hpray refuses dev as it is, and prints the RayJob where a third
    # node of each pool makes room (its head goes on the system nodes).
    from ops.cli import main as hpray

    def refuse(*_a, **_k):
        raise AssertionError("a dry run made a client")

    def submit(load_config=None):
        out, err = io.StringIO(), io.StringIO()
        extra = {"load_config": load_config} if load_config else {}
        argv = ["submit", "smoke", "--env", "dev", "--dry-run"]
        code = hpray(argv, out=out, err=err, prog="hpray", aws_factory=refuse, kube_factory=refuse, **extra)
        return code, out.getvalue(), err.getvalue()

    code, _, err = submit()
    assert code == 2 and "placement (HyperPod replacing a node of gpu-workers)" in err
    groups = [g.model_copy(update={"instance_count": 3}) for g in env.hyperpod.instance_groups]
    system = env.eks.system_nodes.model_copy(update={"desired_size": 3, "max_size": 4})
    roomy = env.model_copy(
        update={
            "hyperpod": env.hyperpod.model_copy(update={"instance_groups": groups}),
            "eks": env.eks.model_copy(update={"system_nodes": system}),
        }
    )
    code, submitted, err = submit(lambda _name: check.check(roomy))
    assert (code, err) == (0, "")
    assert yaml.safe_load(submitted) == smoke.render(roomy)
    # Its NetworkPolicies, among the RayJobs (before the RayServices'); no disruption budget (a RayJob).
    policies = [p["metadata"]["name"] for p in network_policy.render(env)["items"]]
    assert {"smoke-test-ray-internal", "smoke-test-from-operator"} <= set(policies)
    assert "smoke-test-serve-ingress" not in policies
    assert policies.index("smoke-test-ray-internal") < policies.index(f"{plan.serve.name}-ray-internal")
    budgets = [b["metadata"]["name"] for b in disruption_budgets.render_disruption_budgets(env)["items"]]
    assert not [b for b in budgets if b.startswith("smoke-test")]
    # The placement check places its head and worker pods in every situation.
    for situation in ("configured", "upgrade", "node-loss"):
        names = {pod.name for pod in placement.platform_pods(env, situation, lost_group=job.group.name, plan=plan)}
        assert {"RayJob smoke-test head", "RayJob smoke-test worker"} <= names, situation
    assert any("RayJob smoke-test head" in row[3] for row in placement.table(env, plan))
    assert check.problems(env) == placement.problems(env, plan)
    # The review's placement table lists it (for the environment with room for it).
    import review.environment

    monkeypatch.setattr(review.environment, "load_checked", lambda _name: check.check(roomy))
    doc = Document("review")
    placement_section(doc, "dev")
    assert "RayJob smoke-test worker" in doc.markdown()
    # The review's Ray diagram: a head and a worker node of it (review/diagram_ray.py).
    from review.diagram_graph import Graph
    from review.diagram_ray import add_ray

    g = Graph(groups={job.group.name: "n_group"}, pools={"n_group": []})
    add_ray(g, env, {})
    assert any("smoke test RayJob" in label and "smoke-test" in label for label in g.nodes.values())


def test_the_registry_is_the_built_in_one_outside_the_block(smoke):
    assert "smoke" in [w.key for w in registry.workloads()]
    with pytest.raises(ValueError, match="unique"), registry.registered(smoke):
        pass
    env = load_environment("dev")
    assert "smoke" in registry.plan_of(env).workloads
    assert "smoke" not in plan_mod.plan_of(env, tuple((w.key, w.plan) for w in registry.WORKLOADS)).workloads


def test_the_pretokenize_job_is_rendered_from_its_section_on_cpus():
    """staging's ``pretokenize:``: a RayJob running the pipeline with the section's arguments and the
    plan's actor count, its worker pod asking no GPU; absent from a config without the section."""
    from config import load_environment

    dev = load_environment("staging")
    job = registry.get("pretokenize").render(dev)
    assert job["spec"]["entrypoint"] == (
        "python -m workloads.pretokenize --input /fsx/datasets/raw/staging/ --output /fsx/datasets/staging-bytes "
        "--tokenizer bytes --text-column text --validation-fraction 0.01 --shard-tokens 67108864 --workers 12 "
        "--cpus-per-worker 1"
    )
    plan = registry.plan_of(dev).workloads["pretokenize"]
    assert (plan.worker.gpus, plan.worker.cpus, plan.group.name) == (0, 12, "data-cpu")
    assert plan.demands[0].count == 12
    bare = dev.model_copy(update={"pretokenize": None})
    assert "pretokenize" not in registry.plan_of(bare).workloads


def test_a_pretokenize_pod_larger_than_its_nodes_is_one_config_error():
    from config import load_environment
    from sizing import placement

    staging = load_environment("staging")
    big = staging.model_copy(update={"pretokenize": staging.pretokenize.model_copy(update={"cpus": 64})})
    assert placement.problems(big, registry.plan_of(big)) == [
        "pretokenize.cpus: 64 CPUs per worker pod, but a ml.m7i.4xlarge node of group 'data-cpu' has 15 free; "
        "allowed: 1-15"
    ]


def test_render_takes_the_config_dir_and_hpray_config_dir(tmp_path, monkeypatch, capsys):
    """`python -m manifests render` reads the environments hpray reads: --config-dir, else $HPRAY_CONFIG_DIR."""
    from pathlib import Path

    from manifests.__main__ import main

    root = Path(__file__).resolve().parents[2]
    mine = tmp_path / "mine"
    mine.mkdir()
    text = (root / "config" / "dev.yaml").read_text()
    (mine / "team.yaml").write_text(text.replace("active_deadline_seconds: 21600", "active_deadline_seconds: 3600"))
    assert main(["render", "training", "--env", "team", "--config-dir", str(mine)]) == 0
    assert "activeDeadlineSeconds: 3600" in capsys.readouterr().out
    monkeypatch.setenv("HPRAY_CONFIG_DIR", str(mine))
    assert main(["render", "training", "--env", "team"]) == 0
    assert "activeDeadlineSeconds: 3600" in capsys.readouterr().out
    assert main(["check", "team"]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main(["render", "training", "--env", "dev", "--config-dir", str(tmp_path)])
    assert str(info.value) == f"error: --config-dir {tmp_path}: no environment file (NAME.yaml) in it"
