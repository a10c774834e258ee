"""Looking into one job or service: ``describe`` (spec, state, pods, events), ``pods``, ``logs
--pod`` (one pod's log, as ``kubectl logs``) and ``logs --output-dir`` (the driver's and every
pod's logs written to files, to keep or attach to a ticket).

A job's pods are its Ray cluster's (``ray.io/cluster``, from the RayJob's status): KubeRay makes
a new cluster per attempt, so they are the current attempt's. A RayService's are its active Ray
cluster's (``status.activeServiceStatus.rayClusterName``); ``logs`` of a service is its head's log.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any, TextIO

import yaml

from ops.errors import EXIT_OK, JobNotFoundError, OpsError
from ops.jobs.control import get_job
from ops.kuberay import summarize_rayjob
from ops.output import table

EVENTS_SHOWN = 10


def _cluster(job: dict[str, Any]) -> str | None:
    st = job.get("status") or {}
    if job.get("kind") == "RayService":
        return ((st.get("activeServiceStatus") or {}).get("rayClusterName")) or (
            (st.get("pendingServiceStatus") or {}).get("rayClusterName")
        )
    return st.get("rayClusterName")


def get_workload(kube: Any, namespace: str, name: str, *, prog: str, env: str) -> dict[str, Any]:
    """The RayJob ``name``, else the RayService ``name`` (describe, pods and logs take either)."""
    from ops.errors import NotFoundError

    try:
        return get_job(kube, namespace, name, prog=prog, env=env)
    except JobNotFoundError:
        try:
            service = kube.get_ray("RayService", namespace, name)
        except NotFoundError:
            raise JobNotFoundError(
                f"no RayJob {name!r} in namespace {namespace}",
                f"list the jobs with: {prog} jobs --env {env} (and the RayServices with: {prog} status --env {env})",
            ) from None
        return {"kind": "RayService", **service}


def _pods(kube: Any, namespace: str, job: dict[str, Any]) -> list[dict[str, Any]]:
    cluster = _cluster(job)
    return kube.list_pods(namespace, f"ray.io/cluster={cluster}") if cluster else []


def pod_row(pod: dict[str, Any]) -> dict[str, Any]:
    meta, spec, st = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    labels = meta.get("labels") or {}
    statuses = st.get("containerStatuses") or []
    waiting = next(
        (
            ((c.get("state") or {}).get("waiting") or {}).get("reason")
            for c in statuses
            if (c.get("state") or {}).get("waiting")
        ),
        None,
    )
    unscheduled = next(
        (
            c.get("message")
            for c in st.get("conditions") or []
            if c.get("type") == "PodScheduled" and c.get("status") == "False"
        ),
        None,
    )
    return {
        "name": meta.get("name"),
        "type": labels.get("ray.io/node-type", "-"),
        "group": labels.get("ray.io/group", "-"),
        "phase": st.get("phase") or "-",
        "ready": f"{sum(bool(c.get('ready')) for c in statuses)}/{len(spec.get('containers') or [])}",
        "restarts": sum(int(c.get("restartCount") or 0) for c in statuses),
        "node": spec.get("nodeName") or "-",
        "ip": st.get("podIP") or "-",
        "started": st.get("startTime") or meta.get("creationTimestamp") or "-",
        "containers": [c.get("name") for c in spec.get("containers") or []],
        "reason": waiting or unscheduled,
    }


def job_pods(kube: Any, namespace: str, name: str, *, prog: str, env: str) -> dict[str, Any]:
    job = get_workload(kube, namespace, name, prog=prog, env=env)
    rows = sorted((pod_row(p) for p in _pods(kube, namespace, job)), key=lambda r: (r["type"] != "head", r["name"]))
    kind = job.get("kind") or "RayJob"
    return {"name": name, "namespace": namespace, "kind": kind, "ray_cluster": _cluster(job), "pods": rows}


def render_pods(report: dict[str, Any]) -> str:
    if not report["pods"]:
        state = "no Ray cluster" if not report["ray_cluster"] else f"Ray cluster {report['ray_cluster']}"
        return f"No pods of {report.get('kind', 'RayJob')} {report['namespace']}/{report['name']} ({state})."
    return table(
        ["POD", "TYPE", "PHASE", "READY", "RESTARTS", "NODE", "STARTED", "REASON"],
        [
            [r["name"], r["type"], r["phase"], r["ready"], r["restarts"], r["node"], r["started"], r["reason"] or ""]
            for r in report["pods"]
        ],
    )


def _runtime_env(spec: dict[str, Any]) -> Any:
    text = spec.get("runtimeEnvYAML")
    if not text:
        return None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _events(kube: Any, namespace: str, names: list[str | None]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for involved in filter(None, names):
        with contextlib.suppress(OpsError):  # events are a help, not the point: RBAC may not allow them
            events += kube.list_events(namespace, f"involvedObject.name={involved}")
    events.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    return [
        {
            "time": e.get("lastTimestamp") or e.get("eventTime"),
            "type": e.get("type"),
            "reason": e.get("reason"),
            "object": f"{(e.get('involvedObject') or {}).get('kind')}/{(e.get('involvedObject') or {}).get('name')}",
            "message": (e.get("message") or "").strip(),
        }
        for e in events[-EVENTS_SHOWN:]
    ]


def _workers(cluster_spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "group": g.get("groupName"),
            "replicas": g.get("replicas"),
            "gpus_per_pod": (((g.get("template") or {}).get("spec") or {}).get("containers") or [{}])[0]
            .get("resources", {})
            .get("limits", {})
            .get("nvidia.com/gpu", 0),
        }
        for g in cluster_spec.get("workerGroupSpecs") or []
    ]


def describe_service(kube: Any, namespace: str, service: dict[str, Any]) -> dict[str, Any]:
    """``describe NAME`` of a RayService: its state, applications, image, workers, pods, events."""
    from ops.kuberay import summarize_rayservice

    spec = service.get("spec") or {}
    cluster_spec = spec.get("rayClusterConfig") or {}
    head = (((cluster_spec.get("headGroupSpec") or {}).get("template") or {}).get("spec") or {}).get("containers") or [
        {}
    ]
    name = (service.get("metadata") or {}).get("name")
    return {
        "kind": "RayService",
        **summarize_rayservice(service),
        "ray_cluster": _cluster(service),
        "image": head[0].get("image"),
        "workers": _workers(cluster_spec),
        "upgrade_strategy": (spec.get("upgradeStrategy") or {}).get("type"),
        "pods": sorted(
            (pod_row(p) for p in _pods(kube, namespace, service)), key=lambda r: (r["type"] != "head", r["name"])
        ),
        "events": _events(kube, namespace, [name, _cluster(service)]),
    }


def render_describe_service(d: dict[str, Any]) -> str:
    apps = ", ".join(f"{k}: {v}" for k, v in d["applications"].items()) or "-"
    lines = [
        f"Name:          {d['namespace']}/{d['name']} (RayService)",
        f"State:         {d['service_status']}, "
        + ("ready" if d["ready"] else f"not ready ({d['ready_reason'] or '-'})")
        + (", upgrading" if d["upgrading"] else ""),
        f"Applications:  {apps}",
        f"Endpoints:     {d['serve_endpoints']}",
        f"Ray cluster:   {d['ray_cluster'] or '-'}",
        f"Image:         {d['image'] or '-'}",
        "Workers:       "
        + (", ".join(f"{w['group']}: {w['replicas']} x {w['gpus_per_pod']} GPUs" for w in d["workers"]) or "-"),
        "",
        "Pods:",
    ]
    lines += [f"  {line}" for line in render_pods({**d, "pods": d["pods"]}).splitlines()]
    lines += ["", "Events:" if d["events"] else "Events: none"]
    if d["events"]:
        rows = [[e["time"] or "", e["type"] or "", e["reason"] or "", e["object"], e["message"]] for e in d["events"]]
        lines += [f"  {line}" for line in table(["TIME", "TYPE", "REASON", "OBJECT", "MESSAGE"], rows).splitlines()]
    return "\n".join(lines)


def describe(kube: Any, namespace: str, name: str, *, prog: str, env: str) -> dict[str, Any]:
    job = get_workload(kube, namespace, name, prog=prog, env=env)
    if job.get("kind") == "RayService":
        return describe_service(kube, namespace, job)
    spec = job.get("spec") or {}
    cluster_spec = spec.get("rayClusterSpec") or {}
    head_containers = (((cluster_spec.get("headGroupSpec") or {}).get("template") or {}).get("spec") or {}).get(
        "containers"
    ) or [{}]
    workers = _workers(cluster_spec)
    events: list[dict[str, Any]] = []
    for involved in filter(None, (name, _cluster(job))):
        with contextlib.suppress(OpsError):  # events are a help, not the point: RBAC may not allow them
            events += kube.list_events(namespace, f"involvedObject.name={involved}")
    events.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    return {
        **summarize_rayjob(job),
        "entrypoint": spec.get("entrypoint"),
        "submission_mode": spec.get("submissionMode", "K8sJobMode"),
        "suspended": bool(spec.get("suspend")),
        "image": head_containers[0].get("image"),
        "workers": workers,
        "runtime_env": _runtime_env(spec),
        "backoff_limit": spec.get("backoffLimit"),
        "pods": sorted(
            (pod_row(p) for p in _pods(kube, namespace, job)), key=lambda r: (r["type"] != "head", r["name"])
        ),
        "events": [
            {
                "time": e.get("lastTimestamp") or e.get("eventTime"),
                "type": e.get("type"),
                "reason": e.get("reason"),
                "object": f"{(e.get('involvedObject') or {}).get('kind')}/{(e.get('involvedObject') or {}).get('name')}",
                "message": (e.get("message") or "").strip(),
            }
            for e in events[-EVENTS_SHOWN:]
        ],
    }


def render_describe(d: dict[str, Any]) -> str:
    if d.get("kind") == "RayService":
        return render_describe_service(d)
    state = d["deployment_status"] + (f" / Ray job {d['job_status']}" if d["job_status"] != "-" else "")
    lines = [
        f"Name:          {d['namespace']}/{d['name']}",
        f"State:         {state}" + (" (suspended)" if d["suspended"] else ""),
        f"Attempts:      {d['failed_attempts']} failed, {d['succeeded']} succeeded (retries: {d['backoff_limit']})",
        f"Started:       {d['start_time'] or '-'}",
        f"Ended:         {d['end_time'] or '-'}",
        f"Ray cluster:   {d['ray_cluster'] or '-'}",
        f"Command:       {d['entrypoint']}",
        f"Image:         {d['image'] or '-'}",
        "Workers:       "
        + (", ".join(f"{w['group']}: {w['replicas']} x {w['gpus_per_pod']} GPUs" for w in d["workers"]) or "-"),
    ]
    if d["reason"] or d["message"]:
        lines.append(f"Last message:  {d['reason'] or ''} {d['message'] or ''}".rstrip())
    if d["runtime_env"]:
        lines.append("Runtime env:")
        text = yaml.safe_dump(d["runtime_env"], sort_keys=True, default_flow_style=False).rstrip()
        lines += [f"  {line}" for line in text.splitlines()]
    lines += ["", "Pods:"]
    pods = render_pods({**d, "pods": d["pods"]})
    lines += [f"  {line}" for line in pods.splitlines()]
    lines += ["", "Events:" if d["events"] else "Events: none"]
    if d["events"]:
        rows = [[e["time"] or "", e["type"] or "", e["reason"] or "", e["object"], e["message"]] for e in d["events"]]
        lines += [f"  {line}" for line in table(["TIME", "TYPE", "REASON", "OBJECT", "MESSAGE"], rows).splitlines()]
    return "\n".join(lines)


def _job_pod(kube: Any, namespace: str, name: str, pod: str, *, prog: str, env: str) -> dict[str, Any]:
    job = get_workload(kube, namespace, name, prog=prog, env=env)
    pods = {p["metadata"]["name"]: p for p in _pods(kube, namespace, job)}
    if pod not in pods:
        raise JobNotFoundError(
            f"{job.get('kind') or 'RayJob'} {namespace}/{name} has no pod {pod!r}"
            + (f" (its pods: {', '.join(sorted(pods))})" if pods else " (it has no pods now)"),
            f"list them with: {prog} pods {name} --env {env}",
        )
    return pods[pod]


def pod_log(
    kube: Any,
    namespace: str,
    name: str,
    pod: str,
    *,
    container: str | None,
    previous: bool,
    tail: int | None,
    follow: bool,
    out: TextIO,
    prog: str,
    env: str,
) -> int:
    """``logs NAME --pod POD``: one of the job's pods' log, as ``kubectl logs`` prints it."""
    obj = _job_pod(kube, namespace, name, pod, prog=prog, env=env)
    containers = [c["name"] for c in (obj.get("spec") or {}).get("containers") or []]
    if container and container not in containers:
        raise JobNotFoundError(
            f"pod {namespace}/{pod} has no container {container!r}", f"use one of: {', '.join(containers)}"
        )
    if not follow:
        out.write(kube.read_pod_log(namespace, pod, container=container, tail_lines=tail, previous=previous))
        out.flush()
        return EXIT_OK
    from urllib3.exceptions import HTTPError

    try:
        for chunk in kube.stream_pod_log(namespace, pod, container=container, tail_lines=tail):
            out.write(chunk.decode(errors="replace"))
            out.flush()
    except HTTPError as err:
        raise OpsError(f"the log stream of pod {namespace}/{pod} broke off: {err}", "run the command again") from None
    return EXIT_OK


def download_logs(
    kube: Any, namespace: str, name: str, output_dir: str, *, out: TextIO, prog: str, env: str, token_fn: Any
) -> int:
    """``logs NAME --output-dir DIR``: DIR/NAME/driver.log (from the head's Jobs API, while the
    cluster lives), DIR/NAME/<pod>.<container>.log for each pod and ``.previous.log`` for a
    container that restarted; a list of what was written, and what could not be."""
    from ops.clients.driver_log import DriverLog

    job = get_job(kube, namespace, name, prog=prog, env=env)
    target = Path(output_dir) / name
    target.mkdir(parents=True, exist_ok=True)
    written: list[tuple[Path, int]] = []
    missing: list[str] = []

    def write(file_name: str, text: str) -> None:
        path = target / file_name
        path.write_text(text)
        written.append((path, len(text)))

    if (job.get("spec") or {}).get("submissionMode") == "HTTPMode":
        try:
            got = DriverLog(kube, namespace, name, token_fn=token_fn).read(job)
        except OpsError as err:
            got, reason = None, err.message
        else:
            reason = "the Ray cluster is not running"
        if got is None:
            missing.append(f"driver.log: {reason}")
        else:
            write("driver.log", got[1])
    for pod in _pods(kube, namespace, job):
        row = pod_row(pod)
        restarted = {
            c.get("name") for c in (pod.get("status") or {}).get("containerStatuses") or [] if c.get("restartCount")
        }
        for container in row["containers"]:
            for previous in (False, True) if container in restarted else (False,):
                file_name = f"{row['name']}.{container}{'.previous' if previous else ''}.log"
                try:
                    write(file_name, kube.read_pod_log(namespace, row["name"], container=container, previous=previous))
                except OpsError as err:
                    missing.append(f"{file_name}: {err.message}")
    (target / "rayjob.json").write_text(json.dumps(job, indent=2, sort_keys=True))
    written.append((target / "rayjob.json", (target / "rayjob.json").stat().st_size))
    for path, size in written:
        print(f"wrote {path} ({size} bytes)", file=out)
    for line in missing:
        print(f"not written: {line}", file=out)
    return EXIT_OK


def service_head_pod(kube: Any, namespace: str, name: str, *, prog: str, env: str) -> str | None:
    """The head pod of RayService ``name``'s active cluster (``logs NAME`` of a service); None for a RayJob."""
    obj = get_workload(kube, namespace, name, prog=prog, env=env)
    if obj.get("kind") != "RayService":
        return None
    heads = [r["name"] for r in (pod_row(p) for p in _pods(kube, namespace, obj)) if r["type"] == "head"]
    if not heads:
        raise JobNotFoundError(
            f"RayService {namespace}/{name} has no head pod now (Ray cluster {_cluster(obj) or '-'})",
            f"see {prog} describe {name} --env {env}",
        )
    return heads[0]
