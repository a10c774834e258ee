"""KubeRay ``ray.io/v1`` RayServices from the environment config.

``render(env)``: the generation app (``workloads.inference.app``) serving the training run's
newest valid checkpoint. ``render_llm(env)``: Ray Serve LLM (``ray.serve.llm``, vLLM engine)
serving a Hugging Face-format model stored on FSx or S3.

Both use the shared building blocks of ``manifests.k8s`` (pinned image, head on the
``system`` nodes, HyperPod node selectors, FSx PVC, service account). Worker pods are sized to
replicas, not to whole nodes: a pod takes the GPUs of one replica (one engine for the LLM), so
that a service can grow one GPU at a time, two services can share a group, and a NewCluster
upgrade needs twice the *service's* GPUs rather than twice the group (checked in
config/inference.py).

Upgrade strategy (``inference.upgrade_strategy``, default ``NewCluster``): KubeRay applies a
change to ``serveConfigV2`` (new checkpoint reload token, batch settings, replica bounds) to the
running cluster in place; only a change to ``rayClusterConfig`` (image, pod sizes) starts a new
cluster, and with ``NewCluster`` the old one keeps serving until the new one is ready: zero
downtime at the cost of the service's GPUs twice over during the switch (ray-project/kuberay
#1476). We choose it because the config check guarantees those GPUs exist in the group; where
they do not, ``None`` (cluster changes need a planned window) or
``NewClusterWithIncrementalUpgrade`` (needs the Gateway API in the cluster) must be chosen
explicitly.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from config import ConfigError, versions
from config.environment import EnvironmentConfig
from config.facts.names import (
    HEAD_IN_SERVE_SERVICE,
    INFERENCE_APP,
    LLM_APP,
    SERVE_PORT,
)
from manifests import ha, k8s, security, serve_config
from manifests import image as image_mod
from sizing import plan as plan_mod
from sizing.plan import INFERENCE, LLM, ServicePlan, Unplanned, workload_plan

if TYPE_CHECKING:
    from pydantic import BaseModel


APP = INFERENCE_APP
LLM_IMPORT_PATH = "ray.serve.llm:build_openai_app"


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (serveConfigV2) as literal blocks, so reviewers can read them; no
    anchors or aliases (objects shared between pod templates are written out in full)."""

    def ignore_aliases(self, data: object) -> bool:
        return True


_Dumper.add_representer(
    str, lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", s, style="|" if "\n" in s else None)
)


def _dump(data: dict[str, Any]) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)


def _image(env: EnvironmentConfig) -> str:
    return image_mod.resolve(env, env.inference.image or env.training.image, "inference.image")


def _service(env: EnvironmentConfig, key: str) -> ServicePlan:
    """The plan of RayService ``key``; where it has none, the reason the plan keeps is the
    ConfigError (no GPU group to run on, say)."""
    service = workload_plan(env, key, {INFERENCE: plan_mod.inference, LLM: plan_mod.llm}[key])
    if not isinstance(service, ServicePlan):
        problems = list(service.problems) if isinstance(service, Unplanned) else []
        raise ConfigError(f"{env.name}.yaml", problems or [f"{key}: no plan"])
    return service


def _worker_group(plan: ServicePlan, *, image: str, app: str, env_vars: dict[str, str] | None = None) -> dict[str, Any]:
    """Replica-sized worker pods on a HyperPod GPU group, sized in the environment's plan
    (sizing/plan.py), in the plan's Ray worker group."""
    return k8s.worker_group(
        plan.worker,
        group_name=plan.worker_group,
        image=image,
        app=app,
        taints=list(plan.group.taints),
        env=k8s.env_list(env_vars or {}),
    )


def _head(image: str, app: str, env_vars: dict[str, str] | None = None) -> dict[str, Any]:
    head = k8s.head_group(
        image,
        app=app,
        env=k8s.env_list(env_vars or {}) or None,
        ports=[
            {"containerPort": 6379, "name": "gcs"},
            {"containerPort": 8265, "name": "dashboard"},
            {"containerPort": 10001, "name": "client"},
            {"containerPort": SERVE_PORT, "name": "serve"},
        ],
    )
    return head


def _rayservice(
    env: EnvironmentConfig,
    *,
    name: str,
    app: str,
    serve_cfg: dict[str, Any],
    head: dict[str, Any],
    workers: list[dict[str, Any]],
) -> dict[str, Any]:
    service: dict[str, Any] = {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": k8s.metadata(name, app),
        "spec": {
            "upgradeStrategy": {"type": env.inference.upgrade_strategy},
            "excludeHeadPodFromServeSvc": not HEAD_IN_SERVE_SERVICE,
            "serveConfigV2": _dump(serve_cfg),
            "rayClusterConfig": security.harden(
                {
                    "rayVersion": k8s.RAY_VERSION,
                    # The Ray autoscaler adds worker pods when Serve autoscaling wants more replicas.
                    "enableInTreeAutoscaling": True,
                    "autoscalerOptions": {"upscalingMode": "Default", "idleTimeoutSeconds": 300},
                    "headGroupSpec": head,
                    "workerGroupSpecs": workers,
                },
                workload=name,
                token_auth=env.eks.ray_token_auth,
            ),
        },
    }
    if env.gcs_fault_tolerance:
        # The head's metadata in the platform's Valkey store: a lost head pod does not take the
        # service down (manifests/ha.py).
        spec = service["spec"]
        spec["rayClusterConfig"] = ha.with_gcs_fault_tolerance(spec["rayClusterConfig"])
    return service


def render(env: EnvironmentConfig, *, reload: str | None = None) -> dict[str, Any]:
    """The RayService of the generation app."""
    service = _service(env, INFERENCE)
    image = _image(env)
    # Serve's mode (HAProxy ingress, throughput preset) must be the same in every Ray process:
    # the controller on the head decides the ingress, the workers run HAProxy and the replicas.
    ray_env = serve_config.ray_env(env)
    worker = _worker_group(service, image=image, app=APP, env_vars=ray_env)
    return _rayservice(
        env,
        name=service.name,
        app=APP,
        serve_cfg=serve_config.serve_deploy_config(env, reload=reload),
        head=_head(image, APP, ray_env),
        workers=[worker],
    )


def llm_config(env: EnvironmentConfig) -> dict[str, Any]:
    """One ``ray.serve.llm`` LLMConfig (as a dict, the form serveConfigV2 args take)."""
    llm = env.inference.llm
    # The GPU type the engines ask for is the one the worker group declares (sizing/pods.py llm_worker).
    accelerator = _service(env, LLM).worker.accelerator_type
    source: Any = {"bucket_uri": llm.model_source} if llm.model_source.startswith("s3://") else llm.model_source
    cfg: dict[str, Any] = {
        "model_loading_config": {"model_id": llm.model_id, "model_source": source},
        "llm_engine": "vLLM",
        "engine_kwargs": {
            "tensor_parallel_size": llm.tensor_parallel_size,
            "max_model_len": llm.max_model_len,
            "gpu_memory_utilization": llm.gpu_memory_utilization,
        },
        "deployment_config": {
            "autoscaling_config": {
                "min_replicas": llm.min_replicas,
                "max_replicas": llm.max_replicas,
                "initial_replicas": max(llm.min_replicas, 1),
            },
            "max_ongoing_requests": llm.max_ongoing_requests,
        },
    }
    if accelerator is not None:
        cfg["accelerator_type"] = accelerator
    return cfg


def render_llm(env: EnvironmentConfig) -> dict[str, Any]:
    """The RayService of Ray Serve LLM (vLLM engine) for ``inference.llm``."""
    llm = env.inference.llm
    if not llm.enabled:
        raise ConfigError(
            f"{env.name}.yaml",
            [
                f"inference.llm.enabled: false in {env.name}.yaml; set it to true (with "
                "inference.llm.model_source on FSx or S3) to render the Serve LLM RayService"
            ],
        )
    image = k8s.RAY_LLM_IMAGE
    if env.network.images_from_ecr:  # Docker Hub through ECR's pull-through cache
        image = versions.ecr_image(image, account=env.account, region=env.region)
    # Weights come from FSx or S3 only: no Hugging Face Hub traffic from a closed network.
    offline = {"HF_HUB_OFFLINE": "1"}
    service = _service(env, LLM)
    worker = _worker_group(service, image=image, app=LLM_APP, env_vars=offline)
    serve_cfg = {
        "proxy_location": "EveryNode",
        "http_options": {"host": "0.0.0.0", "port": SERVE_PORT},
        "applications": [
            {
                "name": "llm",
                "route_prefix": "/",
                "import_path": LLM_IMPORT_PATH,
                "args": {"llm_configs": [llm_config(env)]},
            }
        ],
    }
    return _rayservice(
        env,
        name=service.name,
        app=LLM_APP,
        serve_cfg=serve_cfg,
        head=_head(image, LLM_APP),
        workers=[worker],
    )


# Offline checks of what the CRD schema cannot see --------------------------------------------


@functools.cache
def _ray_model_fields() -> dict[str, set[str]]:
    """Field names of Ray Serve LLM's config models, read from the installed Ray's source.

    ``ray.serve.llm`` cannot be imported without vLLM (not installable here, no GPU), so the
    pydantic classes are read with ``ast`` instead: the keys we render must be fields there.
    """
    import ray

    root = Path(ray.__file__).parent / "llm" / "_internal"
    wanted = {"LLMConfig", "ModelLoadingConfig", "CloudMirrorConfig", "LLMServingArgs"}
    found: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        text = path.read_text()
        if not any(f"class {w}(" in text for w in wanted):
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.name in wanted and node.name not in found:
                found[node.name] = {
                    s.target.id
                    for s in node.body
                    if isinstance(s, ast.AnnAssign)
                    and isinstance(s.target, ast.Name)
                    and not s.target.id.startswith("_")
                }
    missing = wanted - set(found)
    if missing:
        raise RuntimeError(f"Ray's source no longer defines {sorted(missing)}; update this check")
    return found


# Ray Serve LLM's documented deployment_config keys (LLMConfig.deployment_config's description).
_LLM_DEPLOYMENT_KEYS = {
    "name",
    "num_replicas",
    "ray_actor_options",
    "max_ongoing_requests",
    "autoscaling_config",
    "max_queued_requests",
    "user_config",
    "health_check_period_s",
    "health_check_timeout_s",
    "graceful_shutdown_wait_loop_s",
    "graceful_shutdown_timeout_s",
    "logging_config",
    "request_router_config",
}


def serve_config_problems(manifest: dict[str, Any]) -> list[str]:
    """Validate ``serveConfigV2`` with Ray Serve's own schema (strict for our app's options) and,
    for Serve LLM apps, the LLMConfig keys against the installed Ray's models."""
    from pydantic import ValidationError
    from ray.serve.schema import ServeDeploySchema

    problems: list[str] = []
    try:
        cfg = yaml.safe_load(manifest["spec"]["serveConfigV2"])
        ServeDeploySchema.model_validate(cfg)
    except (ValidationError, yaml.YAMLError, KeyError, TypeError) as err:
        return [f"spec.serveConfigV2: {err}"]
    # Ray's Serve schemas ignore unknown keys; like kubectl's strict mode, we do not.
    from ray.serve.schema import DeploymentSchema, ServeApplicationSchema

    def unknown(d: dict[str, Any], model: type[BaseModel], where: str) -> list[str]:
        allowed = set(model.model_fields) | {f.alias for f in model.model_fields.values() if f.alias}
        return [f"{where}.{k}: unknown field (not in Ray's {model.__name__})" for k in sorted(set(d) - allowed)]

    problems += unknown(cfg, ServeDeploySchema, "spec.serveConfigV2")
    fields = _ray_model_fields()
    for i, app in enumerate(cfg.get("applications", [])):
        where = f"spec.serveConfigV2.applications[{i}]"
        problems += unknown(app, ServeApplicationSchema, where)
        for j, dep in enumerate(app.get("deployments", [])):
            problems += unknown(dep, DeploymentSchema, f"{where}.deployments[{j}]")
        if app.get("import_path") != LLM_IMPORT_PATH:
            continue
        args = app.get("args", {})
        problems += [f"{where}.args.{k}: not a LLMServingArgs field" for k in set(args) - fields["LLMServingArgs"]]
        for j, llm in enumerate(args.get("llm_configs", [])):
            w = f"{where}.args.llm_configs[{j}]"
            problems += [f"{w}.{k}: not a LLMConfig field" for k in sorted(set(llm) - fields["LLMConfig"])]
            mlc = llm.get("model_loading_config", {})
            problems += [
                f"{w}.model_loading_config.{k}: not a ModelLoadingConfig field"
                for k in sorted(set(mlc) - fields["ModelLoadingConfig"])
            ]
            src = mlc.get("model_source")
            if isinstance(src, dict):
                problems += [
                    f"{w}.model_loading_config.model_source.{k}: not a CloudMirrorConfig field"
                    for k in sorted(set(src) - fields["CloudMirrorConfig"])
                ]
            problems += [
                f"{w}.deployment_config.{k}: not a Serve LLM deployment option"
                for k in sorted(set(llm.get("deployment_config", {})) - _LLM_DEPLOYMENT_KEYS)
            ]
            acc = llm.get("accelerator_type")
            if acc is not None:
                from ray.util.accelerators import accelerators

                names = {v for k, v in vars(accelerators).items() if k.isupper() and isinstance(v, str)}
                if acc not in names:
                    problems.append(f"{w}.accelerator_type: {acc!r} is not one of Ray's accelerator types")
    return problems


def to_yaml(manifest: dict[str, Any]) -> str:
    return _dump(manifest)


__all__ = ["llm_config", "render", "render_llm", "serve_config_problems", "to_yaml"]
