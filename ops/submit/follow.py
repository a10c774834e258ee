"""``submit training|inference``: render the manifest, apply it, follow it to the end.

Apply rules (idempotent, so rerunning a command is safe):

- RayJob not there: create it.
- RayJob there and still running: do not touch it; follow it (same as ``--attach``).
- RayJob there and finished: delete it and create it again. The training job has a stable run
  name and storage path, so the new run resumes from the last checkpoint of the old one.
- RayService: create, or replace the spec (KubeRay rolls the new version out without downtime).

Ctrl-C stops following only; the job keeps running and the message says how to reattach.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from ops.clients.driver_log import DriverLog, TokenFn
from ops.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, NotFoundError, OpsError
from ops.kuberay import TERMINAL_DEPLOYMENT
from ops.output import to_json
from ops.submit.progress import JobProgress, ServiceProgress

# Carriage return and "erase the line" (ECMA-48 EL): the status line is redrawn in place.
CLEAR_LINE = "\r\x1b[K"


def is_terminal(out: TextIO) -> bool:
    isatty = getattr(out, "isatty", None)
    return bool(isatty and isatty())


def _columns(out: TextIO) -> int:
    """The terminal's width (``out``'s own, not this process's stdout); 100 when it has none."""
    try:
        return os.get_terminal_size(out.fileno()).columns or 100
    except (AttributeError, OSError, ValueError):
        return 100


# The command that submits a workload, where it is not `submit <workload>` (the LLM service).
SUBMIT_VERB = {"inference-llm": "rollout llm"}


def submit_command(workload: str, env: str, prog: str = "hpray") -> str:
    return f"{prog} {SUBMIT_VERB.get(workload, f'submit {workload}')} --env {env}"


def reattach_command(workload: str, env: str, prog: str = "hpray") -> str:
    return f"{submit_command(workload, env, prog)} --attach"


def interrupted_message(workload: str, env: str, kind: str, namespace: str, name: str, prog: str = "hpray") -> str:
    return (
        f"\nStopped following. The {kind} {namespace}/{name} keeps running on the cluster.\n"
        f"  reattach:  {reattach_command(workload, env, prog)}\n"
        f"  or watch:  kubectl -n {namespace} get {kind.lower()} {name} -w"
    )


def apply(kube: Any, manifest: dict[str, Any], emit: Callable[[str], None]) -> str:
    """Create or update the object; returns what was done ("created", "replaced", "attached")."""
    kind = manifest["kind"]
    meta = manifest["metadata"]
    namespace, name = meta.get("namespace", "default"), meta["name"]
    try:
        existing = kube.get_ray(kind, namespace, name)
    except NotFoundError:
        existing = None
    if existing is None:
        kube.create_ray(kind, namespace, manifest)
        emit(f"created {kind} {namespace}/{name}")
        return "created"
    if kind == "RayJob":
        deployment = (existing.get("status") or {}).get("jobDeploymentStatus") or "New"
        if deployment not in TERMINAL_DEPLOYMENT:
            emit(
                f"{kind} {namespace}/{name} is already running ({deployment}); following it instead of submitting again"
            )
            return "attached"
        emit(
            f"{kind} {namespace}/{name} finished earlier ({deployment}); deleting it to submit again (the run resumes from its checkpoints)"
        )
        kube.delete_ray(kind, namespace, name)
        _wait_gone(kube, kind, namespace, name)
        kube.create_ray(kind, namespace, manifest)
        emit(f"created {kind} {namespace}/{name}")
        return "replaced"
    body = dict(manifest)
    body["metadata"] = {**meta, "resourceVersion": existing["metadata"]["resourceVersion"]}
    kube.replace_ray(kind, namespace, name, body)
    emit(f"updated {kind} {namespace}/{name}; KubeRay rolls out the new spec")
    return "replaced"


def _wait_gone(
    kube: Any,
    kind: str,
    namespace: str,
    name: str,
    *,
    timeout_s: float = 300,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            kube.get_ray(kind, namespace, name)
        except NotFoundError:
            return
        sleep(2)
    raise OpsError(
        f"{kind} {namespace}/{name} was not deleted within {int(timeout_s)} s",
        f"check finalizers: kubectl -n {namespace} get {kind.lower()} {name} -o yaml",
    )


@dataclass(frozen=True)
class Target:
    """What a :class:`Follower` follows: one RayJob or RayService of one environment."""

    workload: str
    env: str
    kind: str
    namespace: str
    name: str
    # How the user runs this CLI: the hints name it (``hpray`` installed, ``python -m ops`` in a checkout).
    prog: str = "hpray"


@dataclass(frozen=True)
class FollowOptions:
    """How a :class:`Follower` follows and shows it; ``sleep``, ``clock`` and ``token_fn`` are
    the seams tests replace."""

    poll_s: float = 5.0
    timeout_s: float | None = None
    total_steps: int | None = None
    json_mode: bool = False
    # live: a terminal; events scroll above one status line that is redrawn in place.
    live: bool = False
    out: TextIO | None = None
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    token_fn: TokenFn | None = None

    @classmethod
    def from_args(cls, args: Any, out: TextIO, **kwargs: Any) -> FollowOptions:
        """The options ``submit`` and ``submit job`` share: --poll-seconds, --timeout-minutes,
        --json; a terminal gets the live display, a pipe or file gets JSON lines as --json does."""
        return cls(
            poll_s=args.poll_seconds,
            timeout_s=args.timeout_minutes * 60 if args.timeout_minutes else None,
            json_mode=args.json or not is_terminal(out),
            live=is_terminal(out),
            out=out,
            **kwargs,
        )


class Follower:
    """Poll the object and its logs, print changes and progress, return an exit code."""

    def __init__(self, kube: Any, target: Target, options: FollowOptions = FollowOptions()):
        self.kube, self.target = kube, target
        self.workload, self.env = target.workload, target.env
        self.kind, self.namespace, self.name = target.kind, target.namespace, target.name
        self.prog = target.prog
        self.poll_s, self.timeout_s, self.json_mode = options.poll_s, options.timeout_s, options.json_mode
        self.total_steps = options.total_steps
        self.out = options.out or sys.stdout
        self.sleep, self.clock = options.sleep, options.clock
        self.driver_log = DriverLog(kube, target.namespace, target.name, token_fn=options.token_fn)
        self.live = options.live and not options.json_mode
        self._status_line = ""
        self._last_line = ""

    def emit(self, text: str, **event: Any) -> None:
        if self.json_mode:
            self.out.write(to_json({"event": "message", "message": text, **event}, compact=True) + "\n")
        elif self.live:
            # Clear the status line, print the event, draw the status line again below it.
            self.out.write(f"{CLEAR_LINE}{text}\n{self._status_line}")
        else:
            self.out.write(text + "\n")
        self.out.flush()

    def _end_live(self) -> None:
        if self.live and self._status_line:
            self.out.write("\n")
            self.out.flush()
            self._status_line = ""

    def run(self) -> int:
        try:
            return self._loop()
        except KeyboardInterrupt:
            self._end_live()
            msg = interrupted_message(self.workload, self.env, self.kind, self.namespace, self.name, self.prog)
            if self.json_mode:
                self.emit(msg.strip(), event="detached", reattach=reattach_command(self.workload, self.env, self.prog))
            else:
                self.out.write(msg + "\n")
                self.out.flush()
            return EXIT_INTERRUPTED

    def _loop(self) -> int:
        started = self.clock()
        progress: JobProgress | ServiceProgress = (
            JobProgress(self.name, total_steps=self.total_steps)
            if self.kind == "RayJob"
            else ServiceProgress(self.name)
        )
        while True:
            try:
                obj = self.kube.get_ray(self.kind, self.namespace, self.name)
            except NotFoundError:
                raise OpsError(
                    f"{self.kind} {self.namespace}/{self.name} does not exist (deleted, or never submitted)",
                    f"submit it: {submit_command(self.workload, self.env, self.prog)}",
                ) from None
            for line in progress.observe_status(obj):
                self.emit(line, event="status", **_status_fields(obj))
            if isinstance(progress, JobProgress):
                for line in self._read_logs(progress, obj):
                    self.emit(line, event="log")
            self._show(progress)
            if isinstance(progress, JobProgress) and progress.finished:
                return self._finish_job(progress)
            if isinstance(progress, ServiceProgress) and progress.ready:
                self._end_live()
                self.emit(f"{self.kind} {self.namespace}/{self.name} is ready", event="done", ready=True)
                return EXIT_OK
            if self.timeout_s is not None and self.clock() - started > self.timeout_s:
                self._end_live()
                self.emit(
                    f"gave up following after {int(self.timeout_s)} s; the {self.kind} keeps going. "
                    f"Reattach: {reattach_command(self.workload, self.env, self.prog)}",
                    event="timeout",
                )
                return EXIT_FAILED
            self.sleep(self.poll_s)

    def _read_logs(self, progress: JobProgress, rayjob: dict[str, Any]) -> list[str]:
        notes: list[str] = []
        for _job_id, line in self.driver_log.poll(rayjob, final=progress.finished):
            notes += progress.observe_log(line, self.clock())
        return notes

    def _show(self, progress: JobProgress | ServiceProgress) -> None:
        line = progress.line()
        if line == self._last_line:
            return
        self._last_line = line
        if self.json_mode:
            payload = (
                progress.as_dict()
                if isinstance(progress, JobProgress)
                else {"ready": progress.ready, "applications": progress.applications}
            )
            self.emit(line, event="progress", **payload)
        elif self.live:
            bar = progress.bar() if isinstance(progress, JobProgress) else ""
            width = _columns(self.out) - 1
            # One terminal row: a wrapped line could not be redrawn in place.
            self._status_line = CLEAR_LINE + (f"{bar} {line}" if bar else line)[:width]
            self.out.write(self._status_line)
            self.out.flush()
        else:
            self.emit("  " + line)

    def _finish_job(self, progress: JobProgress) -> int:
        self._end_live()
        where = f"{self.kind} {self.namespace}/{self.name}"
        if progress.succeeded:
            self.emit(
                f"{where} succeeded at step {progress.step}" if progress.step is not None else f"{where} succeeded",
                event="done",
                succeeded=True,
            )
            return EXIT_OK
        self.emit(
            f"{where} ended {progress.deployment_status}/{progress.job_status}: {progress.message or 'no message'}. "
            f"Driver log: {self.prog} logs {self.name} --env {self.env}",
            event="done",
            succeeded=False,
        )
        return EXIT_FAILED


def _status_fields(obj: dict[str, Any]) -> dict[str, Any]:
    st = obj.get("status") or {}
    return {k: st.get(k) for k in ("jobStatus", "jobDeploymentStatus", "failed", "serviceStatus") if k in st}
