"""The driver's log of an HTTPMode RayJob, from the head's Ray Jobs API.

In HTTPMode KubeRay submits the job to the head's dashboard (port 8265) under the RayJob's
``status.jobId`` and no pod prints the driver's output: the driver runs on the head and Ray keeps
its output in a file that the Jobs API serves (``GET /api/jobs/{submission_id}/logs``, the whole
log so far). The CLI reaches the head through the Kubernetes API's pod port-forward
(``Kube.pod_http_get``; the NetworkPolicies admit nobody else to 8265) and, where Ray's token
authentication is on, sends the token in ``x-ray-authorization`` (Ray's header for callers behind
proxies, the one KubeRay sends).

Following re-reads the log every few seconds and prints what is new: the Jobs API's streaming
form is a websocket (``/logs/tail``), which a pod port-forward carries only as raw bytes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from ops.clients.ray_head import DASHBOARD_PORT, auth_token, head_pod
from ops.errors import ClusterAccessError, NotFoundError, OpsError

# Ray's header for a token that must not be taken by a proxy in front of the dashboard
# (ray/_private/authentication/authentication_constants.py, Ray >= 2.52).
RAY_AUTH_HEADER = "x-ray-authorization"

TokenFn = Callable[[Any, str, dict[str, Any]], "str | None"]


def default_token(kube: Any, namespace: str, head: dict[str, Any]) -> str | None:
    """The head's token where its container runs Ray's token authentication (ops/jobs.auth_token)."""
    return auth_token(kube, namespace, head)


class DriverLog:
    """New lines of one RayJob's driver log on each ``poll``; the job's ID (a new one per KubeRay
    retry) and its head come from the RayJob's status."""

    def __init__(self, kube: Any, namespace: str, name: str, *, token_fn: TokenFn | None = None):
        self.kube, self.namespace, self.name = kube, namespace, name
        self.token_fn = token_fn or default_token
        self._heads: dict[str, tuple[str, dict[str, str]]] = {}  # cluster -> (head pod, headers)
        self._offsets: dict[str, int] = {}  # job ID -> characters already returned
        self.job_ids: list[str] = []  # in the order they appeared
        self._current: tuple[str, str, dict[str, str]] | None = None  # (job ID, head pod, headers)

    def _target(self, rayjob: dict[str, Any]) -> tuple[str, str, dict[str, str]] | None:
        st = rayjob.get("status") or {}
        job_id, cluster = st.get("jobId"), st.get("rayClusterName")
        if not job_id or not cluster:
            return None
        if cluster not in self._heads:
            try:
                head = head_pod(self.kube, self.namespace, cluster)
            except OpsError:
                return None  # not running (yet, or any more)
            token = self.token_fn(self.kube, self.namespace, head)
            headers = {RAY_AUTH_HEADER: f"Bearer {token}"} if token else {}
            self._heads[cluster] = (head["metadata"]["name"], headers)
        pod, headers = self._heads[cluster]
        return job_id, pod, headers

    def read(self, rayjob: dict[str, Any]) -> tuple[str, str] | None:
        """(job ID, the whole log so far), or None while the job has no log to read."""
        target = self._target(rayjob)
        if target is None:
            return None
        text = self._get(*target)
        return None if text is None else (target[0], text)

    def _get(self, job_id: str, pod: str, headers: dict[str, str]) -> str | None:
        path = f"/api/jobs/{quote(job_id, safe='')}/logs"
        try:
            status, body = self.kube.pod_http_get(self.namespace, pod, DASHBOARD_PORT, path, headers)
        except NotFoundError:
            self._heads.clear()  # the head pod went; find the new one next time
            return None
        if status == 404:
            return None  # not submitted yet
        if status in (401, 403):
            raise ClusterAccessError(
                f"the Ray dashboard of {self.namespace}/{pod} refused the log of job {job_id}: {status} "
                f"{body.decode('utf-8', 'replace').strip()[:200]}",
                "Ray token authentication is on and the head refused the token sent (the platform's, from "
                "Secrets Manager): a head started before the token changed keeps the old one until it restarts",
            )
        if status != 200:
            raise OpsError(
                f"the Ray dashboard of {self.namespace}/{pod} answered {status} for the log of job {job_id}: "
                f"{body.decode('utf-8', 'replace').strip()[:200]}",
                "retry; if it persists, look at the head pod's dashboard log",
            )
        if job_id not in self.job_ids:
            self.job_ids.append(job_id)
        return json.loads(body).get("logs") or ""

    def poll(self, rayjob: dict[str, Any], *, final: bool = False) -> list[tuple[str, str]]:
        """(job ID, line) for each complete line written since the last poll (``final``: the
        unterminated last one too).
        When KubeRay has moved on to a new attempt, the previous attempt's last lines come first,
        while its head still answers."""
        target = self._target(rayjob)
        if target is None:
            return []
        lines: list[tuple[str, str]] = []
        if self._current and self._current[0] != target[0]:
            try:
                old = self._get(*self._current)
            except OpsError:
                old = None
            if old is not None:
                lines += self._new(self._current[0], old, final=True)
        self._current = target
        text = self._get(*target)
        if text is not None:
            lines += self._new(target[0], text, final=final)
        return lines

    def _new(self, job_id: str, text: str, *, final: bool) -> list[tuple[str, str]]:
        start = self._offsets.get(job_id, 0)
        if len(text) < start:
            start = 0  # resubmitted under the same ID after a head restart: a new log
        end = len(text) if final else text.rfind("\n", start) + 1
        if end <= start:
            return []
        self._offsets[job_id] = end
        return [(job_id, line) for line in text[start:end].splitlines()]
