"""The autoscaling check (sizing/autoscaling.py) against Ray's own autoscaler code on every
rendered RayJob and RayService of dev, staging and prod, and issue 27's fault 4: the LLM
service's worker group declared no ``accelerator_type:L40S``, so the autoscaler had no worker
type for a second replica."""

from __future__ import annotations

import ast
import copy
import functools
import json
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from config import load_environment
from manifests import registry
from sizing import autoscaling, pods
from sizing.autoscaling import Demand, NodeType
from tests.config.config_data import config_errors

ENVS = ("dev", "staging", "prod")


def _manifests(name: str) -> list[dict[str, Any]]:
    """Every workload the environment deploys, as the registry renders it."""
    env = load_environment(name)
    return [w.render(env) for w, _ in registry.deployed(env)]


def _cluster(m: dict[str, Any]) -> dict[str, Any]:
    return m["spec"]["rayClusterConfig" if m["kind"] == "RayService" else "rayClusterSpec"]


def _workload(m: dict[str, Any]) -> str:
    return f"{m['kind']} {m['metadata']['name']}"


def _view(types: dict[str, NodeType]) -> dict[str, tuple[int, int, dict[str, float]]]:
    return {n: (t.min_workers, t.max_workers, dict(t.resources)) for n, t in types.items()}


def _rays_node_types(m: dict[str, Any]) -> dict[str, Any]:
    from ray.autoscaler._private.kuberay.autoscaling_config import _derive_autoscaling_config_from_ray_cr

    cr = {"metadata": {"name": m["metadata"]["name"], "namespace": m["metadata"]["namespace"]}, "spec": _cluster(m)}
    return _derive_autoscaling_config_from_ray_cr(cr)["available_node_types"]


def _rays_view(m: dict[str, Any]) -> dict[str, tuple[int, int, dict[str, float]]]:
    return {n: (t["min_workers"], t["max_workers"], t["resources"]) for n, t in _rays_node_types(m).items()}


def _demands(name: str) -> dict[str, tuple[dict[str, Any], list[Demand]]]:
    return {w: (spec, ds) for w, spec, ds in autoscaling.demands(registry.plan_of(load_environment(name)))}


# --- The derivation is KubeRay's ---------------------------------------------------------------


@pytest.mark.parametrize("name", ENVS)
def test_node_types_are_rays_derivation_of_every_rendered_cluster(name):
    for m in _manifests(name):
        assert _view(autoscaling.node_types(_cluster(m))) == _rays_view(m), _workload(m)


@pytest.mark.parametrize("name", ENVS)
def test_the_checked_clusters_are_the_rendered_ones(name):
    """What the check derives from the plan at load is what the manifests render."""
    checked = _demands(name)
    rendered = {_workload(m): m for m in _manifests(name)}
    assert set(checked) == set(rendered)
    for workload, (spec, _) in checked.items():
        assert _view(autoscaling.node_types(spec)) == _rays_view(rendered[workload]), workload


SPECS = {
    "limits only (GPU from nvidia.com/gpu)": {
        "groupName": "g",
        "minReplicas": 0,
        "maxReplicas": 3,
        "rayStartParams": {},
        "template": {
            "spec": {
                "containers": [{"resources": {"limits": {"cpu": "1500m", "memory": "1.5Gi", "nvidia.com/gpu": 2}}}]
            }
        },
    },
    "requests only, hosts per replica": {
        "groupName": "g",
        "minReplicas": 1,
        "maxReplicas": 2,
        "numOfHosts": 2,
        "rayStartParams": {"memory": "1000000"},
        "template": {"spec": {"containers": [{"resources": {"requests": {"cpu": "3", "memory": "4G"}}}]}},
    },
    "rayStartParams custom resources": {
        "groupName": "g",
        "minReplicas": 1,
        "maxReplicas": 1,
        "rayStartParams": {
            "num-cpus": "7",
            "num-gpus": "1",
            "resources": '"{\\"accelerator_type:L40S\\": 1, \\"x\\": 3}"',
        },
        "template": {"spec": {"containers": [{"resources": {"limits": {"cpu": "8", "memory": "16Gi"}}}]}},
    },
    "top-level resources win": {
        "groupName": "g",
        "minReplicas": 1,
        "maxReplicas": 4,
        "resources": {"CPU": "2500m", "GPU": "1", "memory": "2Gi", "accelerator_type:H100": "1"},
        "rayStartParams": {"num-cpus": "7", "resources": '"{\\"x\\": 3}"'},
        "template": {"spec": {"containers": [{"resources": {"limits": {"cpu": "8"}}}]}},
    },
}


@pytest.mark.parametrize("case", sorted(SPECS))
def test_each_source_of_resources_is_read_as_ray_reads_it(case):
    group = SPECS[case]
    head = {"rayStartParams": {"num-cpus": "0"}, "template": {"spec": {"containers": [{"resources": {}}]}}}
    cluster = {"headGroupSpec": head, "workerGroupSpecs": [group]}
    m = {"kind": "RayService", "metadata": {"name": "c", "namespace": "n"}, "spec": {"rayClusterConfig": cluster}}
    assert _view(autoscaling.node_types(cluster)) == _rays_view(m)


def test_quantities_are_read_as_ray_reads_them():
    from ray.autoscaler._private.kuberay.utils import parse_quantity

    for q in ("500m", "2", "1.5Gi", "4G", "100Ki", "3k", "1e3", 7, "12n", "250u"):
        assert autoscaling.parse_quantity(q) == parse_quantity(q), q
    with pytest.raises(ValueError, match="'lots' is not a Kubernetes quantity"):
        autoscaling.parse_quantity("lots")


# --- The demands are what the workloads ask Ray for ---------------------------------------------


def _ray_function(path: Path, name: str) -> Any:
    """A function of Ray's installed source, for modules that cannot be imported here (Serve LLM
    needs vLLM)."""
    tree = ast.parse(path.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    namespace: dict[str, Any] = {"copy": copy, "Dict": dict, "List": list, "Optional": Any}
    exec(compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec"), namespace)
    return namespace[name]


def _ray_llm_root() -> Path:
    import ray

    return Path(ray.__file__).parent / "llm" / "_internal" / "serve"


def _rays_llm_bundles(cfg: dict[str, Any]) -> tuple[list[dict[str, float]], str]:
    """One Serve LLM replica's placement group as ``LLMServer.get_deployment_options`` builds it."""
    from ray.llm._internal.serve.core.configs.accelerators import GPUAccelerator
    from ray.llm._internal.serve.core.configs.llm_config import LLMConfig

    c = LLMConfig.model_validate(cfg)
    ranks = GPUAccelerator.default_bundles(
        None, num_devices=c.engine_kwargs.get("tensor_parallel_size", 1), accelerator_type_str=c.accelerator_type
    )
    options = c.deployment_config.get("ray_actor_options", {})
    replica = {"CPU": options.get("num_cpus", 1), "GPU": options.get("num_gpus", 0)}
    merge = _ray_function(
        _ray_llm_root() / "core" / "server" / "llm_server.py", "_merge_replica_actor_and_child_actor_bundles"
    )
    # VLLMEngineConfig.placement_strategy without a placement_group_config: its last return.
    source = (_ray_llm_root() / "engines" / "vllm" / "vllm_models.py").read_text()
    prop = next(
        n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == "placement_strategy"
    )
    last = prop.body[-1]
    assert isinstance(last, ast.Return) and isinstance(last.value, ast.Constant)
    return merge(ranks, replica), last.value.value


def _nonzero(b: dict[str, float]) -> dict[str, float]:
    return {k: float(v) for k, v in b.items() if v}


@pytest.mark.parametrize("name", ENVS)
def test_the_demands_are_what_ray_serve_and_ray_train_ask_for(name):
    from ray.serve._private.config import ReplicaConfig
    from ray.serve.config import AutoscalingConfig

    from workloads.training import job
    from workloads.training.__main__ import settings_from_args

    checked = _demands(name)
    for m in _manifests(name):
        ds = {d.who: d for d in checked[_workload(m)][1]}
        if m["kind"] == "RayJob" and m["metadata"]["labels"]["app.kubernetes.io/name"] == "export":
            # The export runs on its head: it asks Ray for nothing.
            assert ds == {} and not _cluster(m)["workerGroupSpecs"]
            continue
        if m["kind"] == "RayJob" and m["metadata"]["labels"]["app.kubernetes.io/name"] == "batch-inference":
            # ray.data.llm's vLLM engines: one placement group a engine, a GPU a tensor-parallel rank.
            b = load_environment(name).batch_inference
            assert b is not None
            d = ds["vLLM engines (ray.data.llm)"]
            assert (d.count, [_nonzero(x) for x in d.bundles]) == (b.engines, [{"GPU": 1.0}] * b.tensor_parallel_size)
            continue
        if m["kind"] == "RayJob" and m["metadata"]["name"] == "pretokenize":
            # python -m workloads.pretokenize ... --workers N --cpus-per-worker C: N actors of C CPUs.
            argv = shlex.split(m["spec"]["entrypoint"])
            d = ds["pretokenize (tokenizer actors)"]
            workers, cpus = int(argv[argv.index("--workers") + 1]), float(argv[argv.index("--cpus-per-worker") + 1])
            assert (d.count, [_nonzero(b) for b in d.bundles]) == (workers, [{"CPU": cpus}])
            continue
        if m["kind"] == "RayJob":
            settings = shlex.split(m["spec"]["entrypoint"])[-1]
            sc = job.scaling_config(settings_from_args(["--settings-json", settings]))
            workers = sc.num_workers if isinstance(sc.num_workers, int) else max(sc.num_workers)
            d = ds["trainer (Ray Train workers)"]
            assert (d.count, [_nonzero(b) for b in d.bundles], d.strategy) == (
                workers,
                [_nonzero(sc._resources_per_worker_not_none)],
                sc.placement_strategy,
            )
            continue
        app = yaml.safe_load(m["spec"]["serveConfigV2"])["applications"][0]
        if app["import_path"] == "ray.serve.llm:build_openai_app":
            cfg = app["args"]["llm_configs"][0]
            bundles, strategy = _rays_llm_bundles(cfg)
            d = ds[f"deployment LLMServer:{cfg['model_loading_config']['model_id']}"]
            assert (d.count, [_nonzero(b) for b in d.bundles], d.strategy) == (
                cfg["deployment_config"]["autoscaling_config"]["max_replicas"],
                [_nonzero(b) for b in bundles],
                strategy,
            )
            # The OpenAI ingress: Serve's defaults (no ray_actor_options, no max_replicas).
            ingress = ds["deployment OpenAiIngress"]
            default = ReplicaConfig.create(lambda: None, ray_actor_options={}).resource_dict
            assert (ingress.count, [_nonzero(b) for b in ingress.bundles]) == (
                AutoscalingConfig().max_replicas,
                [_nonzero(default)],
            )
            continue
        for dep in app["deployments"]:
            d = ds[f"deployment {dep['name']}"]
            resources = ReplicaConfig.create(lambda: None, ray_actor_options=dep["ray_actor_options"]).resource_dict
            assert (d.count, [_nonzero(b) for b in d.bundles]) == (
                dep["autoscaling_config"]["max_replicas"],
                [_nonzero(resources)],
            )


# --- The bin-packing is Ray's -------------------------------------------------------------------


def _rays_residual(m: dict[str, Any], demands: list[Demand]) -> list[dict[str, float]]:
    """What Ray's scheduler leaves unplaced of ``demands`` on ``m``'s cluster: the head placed
    first (``get_bin_pack_residual``), then worker nodes launched for the rest (``get_nodes_for``)."""
    from ray._private.gcs_utils import PlacementGroupTableData
    from ray.autoscaler._private.node_provider_availability_tracker import NodeAvailabilitySummary
    from ray.autoscaler._private.resource_demand_scheduler import (
        _default_utilization_scorer,
        get_bin_pack_residual,
        get_nodes_for,
        placement_groups_to_resource_demands,
    )
    from ray.core.generated.common_pb2 import Bundle, PlacementStrategy

    groups = [
        PlacementGroupTableData(
            strategy=PlacementStrategy.Value(d.strategy),
            bundles=[Bundle(unit_resources=_nonzero(dict(b))) for b in d.bundles],
        )
        for d in demands
        for _ in range(d.count)
    ]
    wanted, spread = placement_groups_to_resource_demands(groups)
    assert spread == []
    types = _rays_node_types(m)
    left, _ = get_bin_pack_residual([types["headgroup"]["resources"]], [dict(w) for w in wanted])
    scorer = functools.partial(
        _default_utilization_scorer, node_availability_summary=NodeAvailabilitySummary(node_availabilities={})
    )
    _, residual = get_nodes_for(
        types,
        {"headgroup": 1},
        "headgroup",
        sum(t["max_workers"] for t in types.values()),
        left,
        scorer,
    )
    return [_nonzero(dict(r)) for r in residual]


def _ours(types: dict[str, NodeType], demands: list[Demand]) -> list[dict[str, float]]:
    bundles = [b for d in demands for _ in range(d.count) for b in autoscaling.resource_demands(d.bundles, d.strategy)]
    return [_nonzero(b) for b in autoscaling.bin_pack_residual(autoscaling.capacity(types), bundles)]


@pytest.mark.parametrize("name", ENVS)
def test_every_bundle_finds_a_node_by_rays_scheduler_and_ours(name):
    checked = _demands(name)
    for m in _manifests(name):
        demands = checked[_workload(m)][1]
        assert _rays_residual(m, demands) == _ours(autoscaling.node_types(_cluster(m)), demands) == []
        assert autoscaling.check(_workload(m), autoscaling.node_types(_cluster(m)), demands) == []
    assert autoscaling.problems(registry.plan_of(load_environment(name))) == []


def test_more_bundles_than_the_groups_hold_are_left_over_by_both():
    """Three 1-GPU replicas on a group of at most 2 one-GPU pods: Ray's scheduler and ours leave
    the same bundle over."""
    m = next(m for m in _manifests("prod") if m["metadata"]["name"] == "hpray-prod-generate")
    demands = [
        Demand("inference.autoscaling.max_replicas", "deployment Generate", 3, "replicas", ({"CPU": 2, "GPU": 1},))
    ]
    types = autoscaling.node_types(_cluster(m))
    assert _rays_residual(m, demands) == _ours(types, demands) == [{"CPU": 2.0, "GPU": 1.0}]
    assert autoscaling.check("RayService hpray-prod-generate", types, demands) == [
        "inference.autoscaling.max_replicas: RayService hpray-prod-generate, deployment Generate: at 3 replicas, "
        "1 of its 3 bundles (such as {CPU: 2, GPU: 1}) find no room on the most nodes the autoscaler may run "
        "(headgroup x1, serve-g6e-serve x2); allowed: at most what the worker groups hold at their maxReplicas"
    ]


def test_strict_pack_is_one_bundle_and_strict_spread_is_refused():
    assert autoscaling.resource_demands([{"GPU": 1, "CPU": 1}, {"GPU": 1}], "STRICT_PACK") == [{"GPU": 2.0, "CPU": 1.0}]
    assert autoscaling.resource_demands([{"GPU": 1}], "SPREAD") == [{"GPU": 1}]
    with pytest.raises(ValueError, match="placement strategy 'STRICT_SPREAD': the autoscaling check knows PACK"):
        autoscaling.resource_demands([{"GPU": 1}], "STRICT_SPREAD")


# --- Fault 4: the LLM worker group as it was rendered -------------------------------------------

FAULT = (
    "inference.llm.max_replicas: RayService hpray-prod-llm, deployment LLMServer:served-llm: a bundle "
    "{CPU: 1, GPU: 1, accelerator_type:L40S: 0.001} fits no node type KubeRay's autoscaler knows (headgroup lacks "
    "CPU 1 (declares 0), GPU 1 (declares 0), accelerator_type:L40S 0.001 (declares 0); serve-g6e-llm lacks "
    "accelerator_type:L40S 0.001 (declares 0)): it starts no worker pod for it, and replicas beyond the pods "
    "already running never start; allowed: a worker group whose spec declares at least "
    "{CPU: 1, GPU: 1, accelerator_type:L40S: 0.001} (rayStartParams num-cpus, num-gpus, resources)"
)


def _llm(name: str) -> dict[str, Any]:
    return next(m for m in _manifests(name) if m["metadata"]["name"].endswith("-llm"))


def test_the_llm_worker_group_declares_the_accelerator_its_replicas_ask_for():
    m = _llm("prod")
    (group,) = _cluster(m)["workerGroupSpecs"]
    assert group["rayStartParams"]["resources"] == '"{\\"accelerator_type:L40S\\": 1}"'
    cfg = yaml.safe_load(m["spec"]["serveConfigV2"])["applications"][0]["args"]["llm_configs"][0]
    assert cfg["accelerator_type"] == "L40S"
    assert json.loads(group["rayStartParams"]["resources"][1:-1].replace("\\", "")) == {
        f"accelerator_type:{cfg['accelerator_type']}": 1
    }


def test_todays_llm_worker_group_leaves_every_replica_unplaced():
    """The LLM worker group as rendered before the fix (no declared resources): Ray's own
    derivation and scheduler find no node for any LLM replica, and the check says so."""
    m = _llm("prod")
    del _cluster(m)["workerGroupSpecs"][0]["rayStartParams"]["resources"]
    demands = _demands("prod")["RayService hpray-prod-llm"][1]
    llm_bundle = {"CPU": 1.0, "GPU": 1.0, "accelerator_type:L40S": 0.001}
    assert _rays_residual(m, demands) == [llm_bundle, llm_bundle]
    assert "accelerator_type:L40S" not in _rays_node_types(m)["serve-g6e-llm"]["resources"]
    assert autoscaling.check("RayService hpray-prod-llm", autoscaling.node_types(_cluster(m)), demands) == [FAULT]


def test_synth_refuses_a_worker_group_that_declares_no_accelerator(monkeypatch):
    """Loading the config runs the check (``make synth`` loads it in ``cdk synth`` and ``python -m
    config``): with the worker group declaring nothing, as before the fix, prod and staging fail."""
    monkeypatch.setattr(pods.WorkerShape, "ray_resources", property(lambda self: {}))
    assert config_errors("prod", lambda d: None) == [FAULT]
    assert config_errors("staging", lambda d: None) == [
        FAULT.replace("hpray-prod-llm", "hpray-stg-llm").replace("serve-g6e-llm", "gpu-workers-llm")
    ]


def test_make_synths_placement_step_prints_the_fault(monkeypatch, capsys):
    """``python -m manifests check ENV`` (run by `make synth` after cdk synth) exits 1 with the error."""
    from manifests.__main__ import main

    monkeypatch.setattr(pods.WorkerShape, "ray_resources", property(lambda self: {}))
    assert main(["check", "prod"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("prod.yaml: 1 configuration error:\n")
    assert err.rstrip().endswith(FAULT)


def test_a_trainer_bundle_larger_than_a_declared_node_is_named():
    """A worker group declaring fewer CPUs than a Ray Train worker asks for: the trainer and the
    resource, in Ray's view and ours."""
    m = next(m for m in _manifests("prod") if m["kind"] == "RayJob")
    _cluster(m)["workerGroupSpecs"][0]["rayStartParams"]["num-cpus"] = "20"
    demands = _demands("prod")["RayJob train-llama-7b-fineweb"][1]
    assert len(_rays_residual(m, demands)) == 32
    assert autoscaling.check("RayJob train-llama-7b-fineweb", autoscaling.node_types(_cluster(m)), demands) == [
        "training.num_workers: RayJob train-llama-7b-fineweb, trainer (Ray Train workers): a bundle {CPU: 23, GPU: 1} "
        "fits no node type KubeRay's autoscaler knows (headgroup lacks CPU 23 (declares 0), GPU 1 (declares 0); "
        "train-p5 lacks CPU 23 (declares 20)): it starts no worker pod for it, and workers beyond the pods already "
        "running never start; allowed: a worker group whose spec declares at least {CPU: 23, GPU: 1} "
        "(rayStartParams num-cpus, num-gpus, resources)"
    ]
