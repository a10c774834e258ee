"""What KubeRay's objects say, read by ``status``, the job commands, ``submit``'s follow loop and
the Ray head lookup (ops/clients/ray_head.py): the RayJob states that end it or stop it, a
condition of an object, and a RayJob's and a RayService's status as a plain summary."""

from __future__ import annotations

from typing import Any

# KubeRay RayJob status.jobDeploymentStatus values that end the RayJob.
TERMINAL_DEPLOYMENT = frozenset({"Complete", "Failed", "ValidationFailed"})
# A stopped RayJob (``spec.suspend``): KubeRay deletes its cluster and keeps the RayJob.
SUSPENDED = frozenset({"Suspending", "Suspended"})


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return c
    return None


def summarize_rayjob(obj: dict[str, Any]) -> dict[str, Any]:
    meta, st = obj.get("metadata") or {}, obj.get("status") or {}
    deployment = st.get("jobDeploymentStatus") or "New"
    return {
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "job_status": st.get("jobStatus") or "-",
        "deployment_status": deployment,
        "failed_attempts": st.get("failed", 0) or 0,
        "succeeded": st.get("succeeded", 0) or 0,
        "ray_cluster": st.get("rayClusterName"),
        "start_time": st.get("startTime"),
        "end_time": st.get("endTime"),
        "reason": st.get("reason"),
        "message": st.get("message"),
        "finished": deployment in TERMINAL_DEPLOYMENT,
    }


def summarize_rayservice(obj: dict[str, Any]) -> dict[str, Any]:
    meta, st = obj.get("metadata") or {}, obj.get("status") or {}
    ready = condition(obj, "Ready")
    upgrading = condition(obj, "UpgradeInProgress")
    apps = ((st.get("activeServiceStatus") or {}).get("applicationStatuses")) or {}
    return {
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "service_status": st.get("serviceStatus") or "-",
        "ready": bool(ready and ready.get("status") == "True"),
        "ready_reason": (ready or {}).get("reason"),
        "upgrading": bool(upgrading and upgrading.get("status") == "True"),
        "serve_endpoints": st.get("numServeEndpoints", 0) or 0,
        "applications": {name: (a or {}).get("status") for name, a in sorted(apps.items())},
    }
