"""Following a user's job (``submit job``): ``JobFollower`` is the ``submit`` follower with this
job's reattach and log hints, and pods that stay unschedulable named with the scheduler's reason
(exit 7 after a grace period)."""

from __future__ import annotations

from typing import Any

from ops.errors import OpsError, UnschedulableError
from ops.submit.follow import Follower, FollowOptions, Target

# How long pods may stay unschedulable before ``submit job`` gives up following (exit 7).
UNSCHEDULABLE_GRACE_S = 300.0


def unschedulable_pods(pods: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(pod, the PodScheduled condition's message) for each Pending pod the scheduler refused."""
    out = []
    for pod in pods:
        status = pod.get("status") or {}
        if status.get("phase") != "Pending":
            continue
        for c in status.get("conditions") or []:
            if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable":
                out.append((pod["metadata"]["name"], c.get("message") or "Unschedulable"))
    return out


def scheduler_reason(kube: Any, namespace: str, pod: str, fallback: str) -> str:
    """The newest FailedScheduling event's message for ``pod`` (what `kubectl describe` shows)."""
    try:
        events = kube.list_events(
            namespace, f"involvedObject.kind=Pod,involvedObject.name={pod},reason=FailedScheduling"
        )
    except OpsError:
        return fallback
    if not events:
        return fallback
    newest = max(
        events,
        key=lambda e: (
            e.get("lastTimestamp") or e.get("eventTime") or (e.get("metadata") or {}).get("creationTimestamp") or ""
        ),
    )
    return (newest.get("message") or fallback).strip()


class JobFollower(Follower):
    """``Follower`` for a user's job: reattach and log hints name this job, and pods that stay
    unschedulable are named with the scheduler's reason (exit 7 after ``unschedulable_grace_s``)."""

    def __init__(
        self,
        kube: Any,
        target: Target,
        options: FollowOptions,
        *,
        prog: str,
        unschedulable_grace_s: float = UNSCHEDULABLE_GRACE_S,
    ):
        super().__init__(kube, target, options)
        self.prog = prog
        self.grace_s = unschedulable_grace_s
        self._unschedulable_since: dict[str, float] = {}
        self._reported: dict[str, str] = {}

    def reattach(self) -> str:
        return f"{self.prog} submit job --env {self.env} --attach --name {self.name}"

    def run(self) -> int:
        try:
            return self._loop()
        except KeyboardInterrupt:
            msg = (
                f"\nStopped following. The RayJob {self.namespace}/{self.name} keeps running on the cluster.\n"
                f"  reattach:  {self.reattach()}\n"
                f"  log:       {self.prog} logs {self.name} --env {self.env} --follow\n"
                f"  stop:      {self.prog} stop {self.name} --env {self.env}"
            )
            if self.json_mode:
                self.emit(msg.strip(), event="detached", reattach=self.reattach())
            else:
                self.out.write(msg + "\n")
                self.out.flush()
            from ops.errors import EXIT_INTERRUPTED

            return EXIT_INTERRUPTED

    def _read_logs(self, progress: Any, rayjob: dict[str, Any]) -> list[str]:
        notes = self._check_scheduling(progress, rayjob)
        return notes + super()._read_logs(progress, rayjob)

    def _check_scheduling(self, progress: Any, rayjob: dict[str, Any]) -> list[str]:
        if progress.deployment_status not in ("Initializing", "Running", "Retrying", "New"):
            return []
        cluster = (rayjob.get("status") or {}).get("rayClusterName")
        if not cluster:
            return []
        pods = self.kube.list_pods(self.namespace, f"ray.io/cluster={cluster}")
        stuck = dict(unschedulable_pods(pods))
        now = self.clock()
        notes = []
        for pod in list(self._unschedulable_since):
            if pod not in stuck:
                del self._unschedulable_since[pod]
        for pod, condition in sorted(stuck.items()):
            since = self._unschedulable_since.setdefault(pod, now)
            reason = scheduler_reason(self.kube, self.namespace, pod, condition)
            if self._reported.get(pod) != reason:
                self._reported[pod] = reason
                notes.append(f"{self.name}: pod {pod} cannot be scheduled: {reason}")
            if now - since >= self.grace_s:
                raise UnschedulableError(
                    f"pod {self.namespace}/{pod} of job {self.name} has been unschedulable for {int(now - since)} s: {reason}",
                    f"free or add capacity (hpray jobs --env {self.env}; stop one with hpray stop NAME --env {self.env}), "
                    "or ask fewer GPUs/nodes; the RayJob keeps waiting until you stop it",
                )
        return notes

    def _finish_job(self, progress: Any) -> int:
        code = super()._finish_job(progress)
        if code:
            self.emit(f"full driver log: {self.prog} logs {self.name} --env {self.env}")
        return code
