"""The Ray head of a running RayJob or RayService: which one (``pick_head``), its pod, and the
token its dashboard and Jobs API take where Ray's token authentication is on (``dashboard``,
``logs``: ops/clients/portforward.py, ops/clients/driver_log.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from config.facts.names import RAY_DASHBOARD_PORT, ray_auth_secret_name, team_ray_auth_secret_name
from ops.errors import JobNotFoundError, NotFoundError, OpsError
from ops.kuberay import SUSPENDED, TERMINAL_DEPLOYMENT

DASHBOARD_PORT = RAY_DASHBOARD_PORT


def pick_head(kube: Any, namespace: str, name: str | None, *, prog: str, env: str) -> tuple[str, str]:
    """(job or service name, its RayCluster) whose head to open: NAME, else the only live one."""
    if name:
        for kind in ("RayJob", "RayService"):
            try:
                obj = kube.get_ray(kind, namespace, name)
            except NotFoundError:
                continue
            cluster = _cluster_of(obj)
            if not cluster:
                raise OpsError(
                    f"{kind} {namespace}/{name} has no running Ray cluster ({_state(obj)})",
                    f"resume or resubmit it first ({prog} jobs --env {env})",
                )
            return name, cluster
        raise JobNotFoundError(
            f"no RayJob or RayService {name!r} in namespace {namespace}", f"list them with: {prog} jobs --env {env}"
        )
    live: list[tuple[str, str]] = []
    for kind in ("RayJob", "RayService"):
        for obj in kube.list_ray(kind, namespace):
            meta = obj.get("metadata") or {}
            cluster = _cluster_of(obj)
            if meta.get("namespace") == namespace and cluster and _state(obj) not in TERMINAL_DEPLOYMENT | SUSPENDED:
                live.append((meta["name"], cluster))
    if len(live) == 1:
        return live[0]
    if not live:
        raise JobNotFoundError(
            f"no running Ray cluster in namespace {namespace}", f"submit a job first: {prog} submit job --env {env} ..."
        )
    raise OpsError(
        f"{len(live)} Ray clusters run in {namespace}: {', '.join(n for n, _ in sorted(live))}",
        f"name one: {prog} dashboard NAME --env {env}",
    )


def _cluster_of(obj: dict[str, Any]) -> str | None:
    st = obj.get("status") or {}
    return st.get("rayClusterName") or (st.get("activeServiceStatus") or {}).get("rayClusterName")


def _state(obj: dict[str, Any]) -> str:
    st = obj.get("status") or {}
    return st.get("jobDeploymentStatus") or st.get("serviceStatus") or "New"


def head_pod(kube: Any, namespace: str, cluster: str) -> dict[str, Any]:
    pods = kube.list_pods(namespace, f"ray.io/cluster={cluster},ray.io/node-type=head")
    running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
    if not running:
        raise OpsError(
            f"the head pod of Ray cluster {namespace}/{cluster} is not running yet", "wait a minute and retry"
        )
    return running[0]


def auth_token(
    kube: Any, namespace: str, pod: dict[str, Any], *, aws: Any = None, secret_id: str | None = None
) -> str | None:
    """The Ray dashboard token where Ray's token authentication is on for this head (its
    container sets ``RAY_AUTH_MODE=token`` and takes ``RAY_AUTH_TOKEN`` from a Secret); None where
    it is off. With ``secret_id`` (the platform's token secret, eks.ray_token_auth) it is read
    from Secrets Manager, where the Kubernetes Secret is synced from: that needs IAM read of one
    secret rather than Kubernetes read of Secrets in the namespace."""
    container = ((pod.get("spec") or {}).get("containers") or [{}])[0]
    env = {e.get("name"): e for e in container.get("env") or []}
    if (env.get("RAY_AUTH_MODE") or {}).get("value") != "token":
        return None
    if aws is not None and secret_id:
        return secrets_manager_token(aws, secret_id)
    source = env.get("RAY_AUTH_TOKEN") or {}
    if "value" in source:
        return source["value"]
    ref = ((source.get("valueFrom") or {}).get("secretKeyRef")) or {}
    if not ref.get("name"):
        raise OpsError(
            "Ray token authentication is on, but the head's RAY_AUTH_TOKEN comes from neither a value nor a Secret"
        )
    return kube.read_secret_value(namespace, ref["name"], ref.get("key", "token"))


def token_secret_id(config: Any, namespace: str) -> str:
    """The Secrets Manager secret of the Ray token the heads of ``namespace`` use: a team's own
    (config teams, constructs/team_access.py) in its namespace, else the platform's."""
    from config.teams import team_of_namespace  # pydantic: only where a token is read

    team = team_of_namespace(list(config.teams), namespace)
    if team is not None:
        return team_ray_auth_secret_name(config.name_prefix, team.name)
    return ray_auth_secret_name(config.name_prefix)


def platform_token_fn(config: Any, aws: Any) -> Callable[[Any, str, dict[str, Any]], str | None] | None:
    """The ``token_fn(kube, namespace, head_pod)`` of every command that calls a head's Jobs API
    or dashboard (following a job's log, ``logs``, ``dashboard``): with ``eks.ray_token_auth``, the
    namespace's token from Secrets Manager (``token_secret_id``: a team's own in its namespace),
    where the heads' Kubernetes Secret is synced from; None where it is off."""
    if not config.eks.ray_token_auth:
        return None

    def token_fn(kube: Any, namespace: str, pod: dict[str, Any]) -> str | None:
        return auth_token(kube, namespace, pod, aws=aws, secret_id=token_secret_id(config, namespace))

    return token_fn


def secrets_manager_token(aws: Any, secret_id: str) -> str:
    """The Ray token from the Secrets Manager secret ``secret_id`` (constructs/ray_auth.py)."""
    value = aws.call("secretsmanager", "get_secret_value", SecretId=secret_id).get("SecretString")
    if not value:
        raise OpsError(f"the Secrets Manager secret {secret_id} holds no string value", "redeploy the cluster stack")
    return str(value)


def dashboard_url(local_port: int, token: str | None) -> str:
    return f"http://127.0.0.1:{local_port}" + (f"/?token={token}" if token else "")
