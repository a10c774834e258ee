"""Everyday job commands: ``jobs``, ``logs``, ``stop``, ``resume`` (the
Ray head they reach, ``dashboard``'s too: ops/clients/ray_head.py).

They act on RayJobs by name in one namespace (the workloads namespace unless ``--namespace``),
like ``kubectl ray`` and the Ray Jobs CLI, and say what to run next.

- ``stop`` sets the RayJob's ``spec.suspend``: KubeRay deletes its RayCluster (the
  GPUs are free at once) and keeps the RayJob as ``Suspended``; ``resume`` clears it and KubeRay
  starts a new cluster and submits the job again. Checkpoints live on FSx / in S3, outside the
  cluster, so both keep them; a job that saves them resumes from the newest. ``stop --delete``
  deletes the RayJob object instead (the checkpoints stay too).
- ``logs`` reads the driver's output from the head's Ray Jobs API (HTTPMode: no submitter pod;
  ops/clients/driver_log.py); ``--follow`` prints what the log adds until the job ends, and goes on to
  the next Ray job when KubeRay retries.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TextIO

from ops.clients.driver_log import DriverLog
from ops.errors import JobNotFoundError, NotFoundError, OpsError
from ops.kuberay import SUSPENDED, TERMINAL_DEPLOYMENT, summarize_rayjob
from ops.output import table, to_json

# The states in which KubeRay acts on ``suspend`` (KubeRay's RayJob controller: Running and
# Initializing may move to Suspending; a finished job has nothing left to stop).
SUSPENDABLE = frozenset({"New", "Initializing", "Running", "Waiting", "Retrying"})


def get_job(kube: Any, namespace: str, name: str, *, prog: str, env: str) -> dict[str, Any]:
    try:
        return kube.get_ray("RayJob", namespace, name)
    except NotFoundError:
        raise JobNotFoundError(
            f"no RayJob {name!r} in namespace {namespace}",
            f"list the jobs with: {prog} jobs --env {env}",
        ) from None


# ---------------------------------------------------------------------------------------------
# jobs
# ---------------------------------------------------------------------------------------------


def list_jobs(kube: Any, namespace: str | None) -> list[dict[str, Any]]:
    """Every RayJob (of ``namespace`` when given), newest first, summarized."""
    rows = []
    for obj in kube.list_ray("RayJob", namespace) if namespace else kube.list_ray("RayJob"):
        meta = obj.get("metadata") or {}
        if namespace and meta.get("namespace") != namespace:
            continue
        row = summarize_rayjob(obj)
        row["created"] = meta.get("creationTimestamp")
        row["suspended"] = bool((obj.get("spec") or {}).get("suspend"))
        row["kind"] = ((meta.get("labels") or {}).get("hpray.io/kind")) or "-"
        rows.append(row)
    return sorted(rows, key=lambda r: (r.get("created") or "", r["name"] or ""), reverse=True)


def render_jobs(rows: list[dict[str, Any]], *, wide: bool = False) -> str:
    """The jobs table; ``wide`` (``-o wide``) adds the kind, Ray cluster, suspension and reason."""
    if not rows:
        return "No RayJobs."
    columns = ["NAMESPACE", "NAME", "STATE", "JOB", "ATTEMPTS FAILED", "STARTED", "ENDED"]
    extra = ["KIND", "RAY CLUSTER", "SUSPENDED", "REASON"] if wide else []
    return table(
        [*columns, *extra],
        [
            [
                r["namespace"],
                r["name"],
                r["deployment_status"],
                r["job_status"],
                r["failed_attempts"],
                r["start_time"],
                r["end_time"],
                *([r.get("kind"), r.get("ray_cluster"), r.get("suspended"), r.get("reason")] if wide else []),
            ]
            for r in rows
        ],
    )


# ---------------------------------------------------------------------------------------------
# logs
# ---------------------------------------------------------------------------------------------


def show_logs(
    kube: Any,
    namespace: str,
    name: str,
    *,
    follow: bool,
    tail: int | None,
    out: TextIO,
    json_mode: bool,
    prog: str,
    env: str,
    poll_s: float = 2.0,
    sleep: Callable[[float], None] = time.sleep,
    token_fn: Any = None,
) -> int:
    """Print the driver's log (ops/clients/driver_log.py); with ``follow`` print what it adds until the job ends."""
    log = DriverLog(kube, namespace, name, token_fn=token_fn)

    def write(job_id: str, lines: list[str]) -> None:
        for line in lines:
            out.write(
                (to_json({"event": "log", "job_id": job_id, "line": line}, compact=True) if json_mode else line) + "\n"
            )
        out.flush()

    def note(text: str) -> None:
        out.write((to_json({"event": "message", "message": text}, compact=True) if json_mode else text) + "\n")
        out.flush()

    job = get_job(kube, namespace, name, prog=prog, env=env)
    if (job.get("spec") or {}).get("submissionMode", "K8sJobMode") != "HTTPMode":
        raise OpsError(
            f"RayJob {namespace}/{name} runs in {(job.get('spec') or {}).get('submissionMode', 'K8sJobMode')}: its driver's "
            "output is in its submitter pod's log, not the Jobs API",
            f"read it with: kubectl -n {namespace} logs job/{name}",
        )
    if not follow:
        got = log.read(job)
        if got is None:
            raise OpsError(
                _no_driver_log(job, namespace, name),
                f"follow it until it starts: {prog} logs {name} --env {env} --follow",
            )
        job_id, text = got
        lines = text.splitlines()
        write(job_id, lines[-tail:] if tail else lines)
        return 0
    waiting_said = False
    shown: list[str] = []  # Ray job IDs whose lines were printed, in order
    while True:
        job = get_job(kube, namespace, name, prog=prog, env=env)
        state = (job.get("status") or {}).get("jobDeploymentStatus") or "New"
        ended = state in TERMINAL_DEPLOYMENT or state in SUSPENDED
        batch = log.poll(job, final=ended)
        if tail and not shown and batch:
            batch = batch[-tail:]
        for job_id, line in batch:
            if job_id not in shown:
                if shown:
                    note(f"--- next attempt: Ray job {job_id} ---")
                shown.append(job_id)
            write(job_id, [line])
        if ended:
            if not shown:
                raise OpsError(_no_driver_log(job, namespace, name), None)
            note(
                f"RayJob {namespace}/{name} is {state}"
                + (f"/{job['status'].get('jobStatus')}" if (job.get("status") or {}).get("jobStatus") else "")
            )
            return 0
        if not waiting_said and not shown:
            note(f"waiting for the driver of {namespace}/{name} to start (RayJob {state})...")
            waiting_said = True
        sleep(poll_s)


def _no_driver_log(job: dict[str, Any], namespace: str, name: str) -> str:
    state = (job.get("status") or {}).get("jobDeploymentStatus") or "New"
    if state in TERMINAL_DEPLOYMENT or state in SUSPENDED:
        return (
            f"RayJob {namespace}/{name} is {state} and its Ray cluster is gone, so is the driver's log "
            "(it lives on the head; KubeRay deletes the cluster ttlSecondsAfterFinished after the end)"
        )
    return f"RayJob {namespace}/{name} is {state}: its driver has not started yet"


# ---------------------------------------------------------------------------------------------
# stop / resume
# ---------------------------------------------------------------------------------------------


def _checkpoints_hint(job: dict[str, Any]) -> str:
    import json

    try:
        env_vars = json.loads((job.get("spec") or {}).get("runtimeEnvYAML") or "{}").get("env_vars") or {}
    except ValueError:
        env_vars = {}
    where = env_vars.get("HPRAY_CHECKPOINT_DIR")
    return f"checkpoints stay in {where}" if where else "checkpoints stay on FSx / in the checkpoint bucket"


def _result(namespace: str, name: str, action: str, previous_state: str, message: str) -> dict[str, Any]:
    """What ``stop``/``resume`` did, for the table and ``--json``."""
    return {
        "name": name,
        "namespace": namespace,
        "action": action,
        "previous_state": previous_state,
        "message": message,
    }


def stop_ray_job(kube: Any, namespace: str, name: str, *, token_fn: Any, prog: str, env: str) -> dict[str, Any]:
    """``stop NAME --job``: stop the Ray job the RayJob submitted, as ``ray job stop`` does (POST
    /api/jobs/ID/stop on the head's dashboard, through a port-forward): the driver and its tasks
    end, the job is STOPPED and KubeRay ends the RayJob (and, with shutdownAfterJobFinishes, its
    Ray cluster). Nothing to resume: submit it again."""
    from urllib.parse import quote

    from ops.clients.driver_log import RAY_AUTH_HEADER
    from ops.clients.ray_head import DASHBOARD_PORT, head_pod

    job = get_job(kube, namespace, name, prog=prog, env=env)
    st = job.get("status") or {}
    state, job_id, cluster = st.get("jobDeploymentStatus") or "New", st.get("jobId"), st.get("rayClusterName")
    if state in TERMINAL_DEPLOYMENT or st.get("jobStatus") in ("STOPPED", "SUCCEEDED", "FAILED"):
        return _result(
            namespace, name, "none", state, f"RayJob {namespace}/{name} already finished ({state}); nothing to stop"
        )
    if not job_id or not cluster:
        raise OpsError(
            f"RayJob {namespace}/{name} has no Ray job running yet ({state})",
            f"stop the whole RayJob instead: {prog} stop {name} --env {env}",
        )
    head = head_pod(kube, namespace, cluster)
    token = token_fn(kube, namespace, head) if token_fn else None
    headers = {RAY_AUTH_HEADER: f"Bearer {token}"} if token else {}
    status, body = kube.pod_http_post(
        namespace, head["metadata"]["name"], DASHBOARD_PORT, f"/api/jobs/{quote(job_id, safe='')}/stop", headers
    )
    if status != 200:
        raise OpsError(
            f"the Ray dashboard of {namespace}/{head['metadata']['name']} answered {status} to stop job {job_id}: "
            f"{body.decode('utf-8', 'replace').strip()[:200]}",
            f"stop the whole RayJob instead: {prog} stop {name} --env {env}",
        )
    return _result(
        namespace,
        name,
        "stopped-job",
        state,
        f"stopped Ray job {job_id} of RayJob {namespace}/{name} (as `ray job stop`); the RayJob ends as STOPPED"
        f"; follow it with: {prog} describe {name} --env {env}",
    )


def stop_job(kube: Any, namespace: str, name: str, *, delete: bool, prog: str, env: str) -> dict[str, Any]:
    job = get_job(kube, namespace, name, prog=prog, env=env)
    state = (job.get("status") or {}).get("jobDeploymentStatus") or "New"
    keep = _checkpoints_hint(job)
    if delete:
        kube.delete_ray("RayJob", namespace, name)
        return _result(
            namespace,
            name,
            "deleted",
            state,
            f"deleted RayJob {namespace}/{name} (was {state}); its Ray cluster goes with it; {keep}",
        )
    if state in TERMINAL_DEPLOYMENT:
        return _result(
            namespace,
            name,
            "none",
            state,
            f"RayJob {namespace}/{name} already finished ({state}); nothing to stop. "
            f"Remove it with: {prog} stop {name} --env {env} --delete",
        )
    if state in SUSPENDED or (job.get("spec") or {}).get("suspend"):
        return _result(
            namespace,
            name,
            "none",
            state,
            f"RayJob {namespace}/{name} is already stopped ({state}); resume it with: {prog} resume {name} --env {env}",
        )
    if not (job.get("spec") or {}).get("shutdownAfterJobFinishes"):
        raise OpsError(
            f"RayJob {namespace}/{name} has shutdownAfterJobFinishes false, and KubeRay suspends only jobs that have it",
            f"delete it instead (checkpoints stay): {prog} stop {name} --env {env} --delete",
        )
    kube.patch_ray("RayJob", namespace, name, {"spec": {"suspend": True}})
    return _result(
        namespace,
        name,
        "suspended",
        state,
        f"stopping RayJob {namespace}/{name} (was {state}): KubeRay deletes its Ray cluster and keeps the job as "
        f"Suspended; {keep}. Resume it with: {prog} resume {name} --env {env}",
    )


def resume_job(kube: Any, namespace: str, name: str, *, prog: str, env: str) -> dict[str, Any]:
    job = get_job(kube, namespace, name, prog=prog, env=env)
    state = (job.get("status") or {}).get("jobDeploymentStatus") or "New"
    if not (job.get("spec") or {}).get("suspend"):
        return _result(
            namespace,
            name,
            "none",
            state,
            f"RayJob {namespace}/{name} is not stopped ({state}); nothing to resume",
        )
    kube.patch_ray("RayJob", namespace, name, {"spec": {"suspend": False}})
    return _result(
        namespace,
        name,
        "resumed",
        state,
        f"resuming RayJob {namespace}/{name}: KubeRay starts a new Ray cluster and submits the job again. "
        f"Follow it: {prog} submit job --env {env} --attach --name {name}",
    )
