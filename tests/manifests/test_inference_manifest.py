"""The RayServices: strict offline validation against the KubeRay v1.7.0 CRDs and Ray's own
Serve schema, and the properties that matter."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from config import load_environment
from manifests import crd, image, k8s
from manifests import inference as manifest

ENVS = ["dev", "staging", "prod"]


def _serve_cfg(m: dict) -> dict:
    return yaml.safe_load(m["spec"]["serveConfigV2"])


@pytest.mark.parametrize("env", ENVS)
def test_generation_rayservice_is_valid(env):
    m = manifest.render(load_environment(env))
    assert crd.validate(m) == []
    assert manifest.serve_config_problems(m) == []


@pytest.mark.parametrize("env", ["staging", "prod"])
def test_llm_rayservice_is_valid(env):
    m = manifest.render_llm(load_environment(env))
    assert crd.validate(m) == []
    assert manifest.serve_config_problems(m) == []


def test_validation_is_strict_about_unknown_fields():
    m = manifest.render(load_environment("dev"))
    m["spec"]["upgradeStrategy"]["typo"] = "x"
    m["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["replica"] = 1
    problems = crd.validate(m)
    assert "unknown field spec.upgradeStrategy.typo" in problems
    assert "unknown field spec.rayClusterConfig.workerGroupSpecs[0].replica" in problems


def test_serve_config_is_checked_by_rays_schema():
    m = manifest.render(load_environment("dev"))
    cfg = _serve_cfg(m)
    cfg["applications"][0]["deployments"][0]["max_ongoing_request"] = 3
    m["spec"]["serveConfigV2"] = yaml.safe_dump(cfg)
    assert manifest.serve_config_problems(m) == [
        "spec.serveConfigV2.applications[0].deployments[0].max_ongoing_request: unknown field "
        "(not in Ray's DeploymentSchema)"
    ]
    cfg["applications"][0]["deployments"][0].pop("max_ongoing_request")
    cfg["applications"][0]["deployments"][0]["max_ongoing_requests"] = "many"
    m["spec"]["serveConfigV2"] = yaml.safe_dump(cfg)
    (problem,) = manifest.serve_config_problems(m)
    assert problem.startswith("spec.serveConfigV2: ") and "max_ongoing_requests" in problem


def test_llm_config_keys_are_checked_against_rays_models():
    m = manifest.render_llm(load_environment("prod"))
    cfg = _serve_cfg(m)
    llm = cfg["applications"][0]["args"]["llm_configs"][0]
    llm["engine_kwarg"] = {}
    llm["model_loading_config"]["model_path"] = "/x"
    llm["accelerator_type"] = "L40"
    m["spec"]["serveConfigV2"] = yaml.safe_dump(cfg)
    w = "spec.serveConfigV2.applications[0].args.llm_configs[0]"
    assert manifest.serve_config_problems(m) == [
        f"{w}.engine_kwarg: not a LLMConfig field",
        f"{w}.model_loading_config.model_path: not a ModelLoadingConfig field",
        f"{w}.accelerator_type: 'L40' is not one of Ray's accelerator types",
    ]


def test_generation_service_shape_prod():
    env = load_environment("prod")
    m = manifest.render(env)
    spec = m["spec"]
    assert m["apiVersion"] == "ray.io/v1" and m["kind"] == "RayService"
    assert spec["upgradeStrategy"] == {"type": "NewCluster"}
    cluster = spec["rayClusterConfig"]
    assert cluster["rayVersion"] == k8s.RAY_VERSION
    head = cluster["headGroupSpec"]["template"]["spec"]
    assert head["nodeSelector"] == {"eks.amazonaws.com/nodegroup": "system"}
    assert cluster["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    (worker,) = cluster["workerGroupSpecs"]
    assert (worker["minReplicas"], worker["maxReplicas"]) == (1, 2)
    pod = worker["template"]["spec"]
    assert pod["nodeSelector"] == {
        "node.kubernetes.io/instance-type": "ml.g6e.12xlarge",
        "sagemaker.amazonaws.com/node-health-status": "Schedulable",
    }
    assert {"key": "workload", "operator": "Equal", "value": "ray-serve", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["serviceAccountName"] == k8s.SERVICE_ACCOUNT
    (c,) = pod["containers"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert "vpc.amazonaws.com/efa" not in c["resources"]["limits"]
    assert {"name": "fsx", "persistentVolumeClaim": {"claimName": k8s.FSX_PVC}} in pod["volumes"]
    assert {"name": "fsx", "mountPath": "/fsx"} in c["volumeMounts"]
    assert c["image"] == image.image_uri(env.account, env.region)
    app = _serve_cfg(m)["applications"][0]
    assert app["import_path"] == "workloads.inference.app:app_builder"
    assert app["args"]["storage_path"] == "/fsx/checkpoints"
    assert app["args"]["run_name"] == env.training.run_name
    assert app["args"]["gpu_dtype"] == "bfloat16"
    dep = app["deployments"][0]
    assert dep["user_config"] == {"max_batch_size": 32, "batch_wait_timeout_s": 0.005}
    assert dep["max_ongoing_requests"] == 64
    assert dep["autoscaling_config"]["max_replicas"] == 2
    assert dep["ray_actor_options"] == {"num_cpus": 2.0, "num_gpus": 1.0}


def test_llm_service_serves_from_s3_in_prod_and_fsx_in_staging():
    prod = manifest.llm_config(load_environment("prod"))
    assert prod["model_loading_config"]["model_source"] == {
        "bucket_uri": "s3://hpray-prod-checkpoints-333333333333-us-east-1/checkpoints/models/llama-7b-fineweb"
    }
    assert prod["accelerator_type"] == "L40S"
    staging = manifest.llm_config(load_environment("staging"))
    assert staging["model_loading_config"]["model_source"] == "/fsx/models/served-llm"
    m = manifest.render_llm(load_environment("prod"))
    c = m["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    # prod is a closed network: Docker Hub's ray-llm through ECR's pull-through cache, on every pod.
    ecr = "333333333333.dkr.ecr.us-east-1.amazonaws.com/docker-hub/"
    assert c["image"] == ecr + k8s.RAY_LLM_IMAGE
    spec = m["spec"]["rayClusterConfig"]
    pods = [spec["headGroupSpec"], *spec["workerGroupSpecs"]]
    assert {c["image"] for p in pods for c in p["template"]["spec"]["containers"]} == {ecr + k8s.RAY_LLM_IMAGE}
    assert {"name": "HF_HUB_OFFLINE", "value": "1"} in c["env"]


def test_llm_service_pulls_from_docker_hub_only_where_the_network_is_open():
    dev = load_environment("dev").model_copy(deep=True)
    assert not dev.network.images_from_ecr
    llm = dev.inference.llm.model_copy(update={"enabled": True, "model_source": "/fsx/models/m", "model_id": "m"})
    m = manifest.render_llm(dev.model_copy(update={"inference": dev.inference.model_copy(update={"llm": llm})}))
    c = m["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    assert c["image"] == k8s.RAY_LLM_IMAGE


def test_serve_high_throughput_mode_is_on_every_ray_container():
    from manifests import serve_config

    def envs(m):
        cluster = m["spec"]["rayClusterConfig"]
        pods = [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
        return [{e["name"]: e["value"] for e in p["template"]["spec"]["containers"][0]["env"]} for p in pods]

    env = load_environment("prod")
    assert env.inference.high_throughput
    for values in envs(manifest.render(env)):
        assert values["RAY_SERVE_ENABLE_HA_PROXY"] == "1"
        assert values["RAY_SERVE_THROUGHPUT_OPTIMIZED"] == "1"
    off = env.model_copy(update={"inference": env.inference.model_copy(update={"high_throughput": False})})
    assert serve_config.ray_env(off) == {}
    for values in envs(manifest.render(off)):
        assert not any(k.startswith("RAY_SERVE_") for k in values)


def test_reload_token_changes_only_serve_config():
    env = load_environment("dev")
    a, b = manifest.render(env), manifest.render(env, reload="step-1200")
    assert a["spec"]["rayClusterConfig"] == b["spec"]["rayClusterConfig"]
    assert _serve_cfg(b)["applications"][0]["deployments"][0]["user_config"]["reload"] == "step-1200"


def test_render_is_deterministic():
    env = load_environment("prod")
    assert manifest.to_yaml(manifest.render(env)) == manifest.to_yaml(manifest.render(env))


def _render_cli(kind: str, env: str) -> subprocess.CompletedProcess:
    """``python -m manifests render KIND --env ENV``, as a user runs it."""
    cmd = [sys.executable, "-m", "manifests", "render", kind, "--env", env]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_cli_renders_inference():
    out = _render_cli("inference", "prod")
    assert out.returncode == 0, out.stderr
    m = yaml.safe_load(out.stdout)
    assert m["kind"] == "RayService" and m["metadata"]["name"] == "hpray-prod-generate"


def test_cli_llm_disabled_is_a_clear_error():
    out = _render_cli("inference-llm", "dev")
    assert out.returncode == 2
    assert "inference.llm.enabled: false in dev.yaml" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("env_name", ["dev", "staging", "prod"])
def test_rendered_args_are_the_replicas_arguments(env_name):
    """Every arg the RayService passes reaches Generate (app_builder binds them to it)."""
    import inspect

    from workloads.inference.app import Generate

    args = dict(_serve_cfg(manifest.render(load_environment(env_name)))["applications"][0]["args"])
    args.pop("deployment", None)
    inspect.signature(Generate).bind(**args)
    assert args["gpu_dtype"] == load_environment(env_name).inference.gpu_dtype
