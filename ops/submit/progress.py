"""Progress of a RayJob / RayService from its status and the job's own log lines. Pure: no I/O.

The follow loop in ops/submit/follow.py feeds in RayJob objects and driver log lines; this module says what
changed (lines to print) and renders the one-line progress display.

Log lines recognised (case-insensitive, anywhere in the line, so Ray's ``(RayTrainWorker pid=…)``
prefixes and logging formats do not matter):

- a JSON object with a ``step`` key (``total_steps``/``loss`` optional) — the structured form;
- ``step 120/1000 … loss 2.31`` / ``step=120 loss=2.31`` — plain progress;
- ``resumed from checkpoint … step 100`` / ``restored … step 100`` — a resume after a failure;
- ``checkpoint saved … step 100`` — a checkpoint;
- ``failure`` / ``node … died`` / ``restarting`` / ``retrying`` / ``worker group … failed`` — a
  failure, after which Ray Train restarts its workers.

The training workload (workloads/training/) prints ``TRAIN start step=0``, ``TRAIN step=N
loss=L`` (with ``log_every_step``), ``TRAIN resume step=N from=PATH``, ``TRAIN done step=N``,
``TRAIN finished step=N loss=L``, ``TRAIN eval val_step=N val_loss=L val_perplexity=P
val_bits_per_byte=B ...`` (training.eval_every_steps) and ``TRAIN failed: ...``; all are recognised.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from ops.kuberay import TERMINAL_DEPLOYMENT

_NUM = r"([-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|nan|inf)"
_STEP = re.compile(r"\bstep[\s:=#]*(\d+)(?:\s*(?:/|of)\s*(\d+))?", re.I)
_LOSS = re.compile(r"\bloss[\s:=]*" + _NUM, re.I)
_TOTAL = re.compile(r"\btotal[_ ]steps[\s:=]*(\d+)", re.I)
_RESUME = re.compile(r"\b(?:resum(?:e|ed|es|ing)|restor(?:e|ed|es|ing))\b.*?\bstep[\s:=#]*(\d+)", re.I)
_CHECKPOINT = re.compile(r"\bcheckpoint\w*\b.*?\b(?:saved|written|reported|persisted)\b.*?\bstep[\s:=#]*(\d+)", re.I)
_CHECKPOINT_2 = re.compile(r"\b(?:saved|wrote|reported)\s+checkpoint\b.*?\bstep[\s:=#]*(\d+)", re.I)
_FAILURE = re.compile(
    r"\b(?:restarting|retrying|relaunching)\b|\bworker group\b.*\bfail|\bfailure\b|\bnode\b.*\b(?:died|lost|dead)\b"
    r"|\bTRAIN failed\b",
    re.I,
)


@dataclass(frozen=True)
class LogEvent:
    kind: str  # "step", "resume", "checkpoint", "eval" or "failure"
    step: int | None = None
    total: int | None = None
    loss: float | None = None
    text: str = ""
    # An evaluation's figures (kind "eval"): val_loss, val_perplexity, val_bits_per_byte.
    values: tuple[tuple[str, float], ...] = ()


# The job's evaluation line (workloads/training/reporter.py Reporter.evaluated).
_EVAL = re.compile(r"\bTRAIN eval\b")
_EVAL_VALUE = re.compile(r"\b(val_step|val_loss|val_perplexity|val_bits_per_byte)=([0-9.eE+-]+)")


def parse_line(line: str) -> LogEvent | None:
    """What a log line says about training progress, or None if nothing."""
    text = line.strip()
    if not text:
        return None
    if _EVAL.search(text):
        found = dict(_EVAL_VALUE.findall(text))
        step = found.pop("val_step", None)
        values = tuple((k, float(v)) for k, v in found.items())
        return LogEvent("eval", step=int(float(step)) if step else None, values=values, text=text)
    m = _RESUME.search(text)
    if m:
        return LogEvent("resume", step=int(m.group(1)), text=text)
    m = _CHECKPOINT.search(text) or _CHECKPOINT_2.search(text)
    if m:
        return LogEvent("checkpoint", step=int(m.group(1)), text=text)
    if _FAILURE.search(text):
        return LogEvent("failure", text=text)
    brace = text.find("{")
    if brace >= 0:
        try:
            data = json.loads(text[brace:])
        except ValueError:
            data = None
        if isinstance(data, dict) and isinstance(data.get("step"), int):
            total = data.get("total_steps")
            loss = data.get("loss")
            return LogEvent(
                "step",
                step=data["step"],
                total=total if isinstance(total, int) else None,
                loss=float(loss) if isinstance(loss, (int, float)) else None,
                text=text,
            )
    m = _STEP.search(text)
    if m:
        total = m.group(2) or (t.group(1) if (t := _TOTAL.search(text)) else None)
        loss = _LOSS.search(text)
        return LogEvent(
            "step",
            step=int(m.group(1)),
            total=int(total) if total else None,
            loss=float(loss.group(1)) if loss else None,
            text=text,
        )
    return None


@dataclass
class JobProgress:
    """What is known about one RayJob run, updated from status objects and log lines."""

    name: str
    job_status: str = "-"
    deployment_status: str = "New"
    failed_attempts: int = 0
    message: str | None = None
    step: int | None = None
    total_steps: int | None = None
    loss: float | None = None
    last_checkpoint: int | None = None
    resumed_from: list[int] = field(default_factory=list)
    failures: int = 0
    # The latest evaluation: its step and figures (val_loss, val_perplexity, val_bits_per_byte).
    eval_step: int | None = None
    evaluation: dict[str, float] = field(default_factory=dict)
    _rate_start: tuple[float, int] | None = None
    _rate_last: tuple[float, int] | None = None

    # -- inputs --------------------------------------------------------------------------------

    def observe_status(self, rayjob: dict[str, Any]) -> list[str]:
        """Update from a RayJob object; returns a line per change worth printing."""
        st = rayjob.get("status") or {}
        deployment = st.get("jobDeploymentStatus") or "New"
        job = st.get("jobStatus") or "-"
        failed = st.get("failed", 0) or 0
        out = []
        if (deployment, job) != (self.deployment_status, self.job_status):
            line = f"{self.name}: {self.deployment_status}/{self.job_status} -> {deployment}/{job}"
            if st.get("reason") or st.get("message"):
                line += f" ({st.get('reason') or ''}{': ' if st.get('reason') and st.get('message') else ''}{st.get('message') or ''})"
            out.append(line)
        if failed > self.failed_attempts:
            out.append(
                f"{self.name}: attempt {failed} failed; KubeRay retries the RayJob on a fresh Ray cluster "
                "(spec.backoffLimit) and training resumes from its latest checkpoint"
            )
        self.deployment_status, self.job_status, self.failed_attempts = deployment, job, failed
        self.message = st.get("message")
        return out

    def observe_log(self, line: str, now: float) -> list[str]:
        event = parse_line(line)
        if event is None:
            return []
        if event.kind == "step":
            if self.step is not None and event.step is not None and event.step < self.step:
                # Steps went back without a resume line: the job restarted from a checkpoint.
                self._rate_start = None
            self.step = event.step
            self.total_steps = event.total or self.total_steps
            self.loss = event.loss if event.loss is not None else self.loss
            self._rate_last = (now, event.step or 0)
            if self._rate_start is None:
                self._rate_start = self._rate_last
            return []
        if event.kind == "checkpoint":
            self.last_checkpoint = event.step
            return []
        if event.kind == "eval":
            self.eval_step, self.evaluation = event.step, dict(event.values)
            return []
        if event.kind == "resume":
            self.resumed_from.append(event.step or 0)
            self.step = event.step
            # The step rate is measured again from the resume point.
            self._rate_start = self._rate_last = (now, event.step or 0)
            return [f"{self.name}: resumed from checkpoint at step {event.step}"]
        self.failures += 1
        return [f"{self.name}: failure in the job log: {event.text[:200]}"]

    # -- outputs -------------------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        return self.deployment_status in TERMINAL_DEPLOYMENT

    @property
    def succeeded(self) -> bool:
        return self.deployment_status == "Complete" and self.job_status == "SUCCEEDED"

    def steps_per_s(self) -> float | None:
        if not self._rate_start or not self._rate_last:
            return None
        dt = self._rate_last[0] - self._rate_start[0]
        ds = self._rate_last[1] - self._rate_start[1]
        return ds / dt if dt > 0 and ds > 0 else None

    def line(self) -> str:
        # While KubeRay sets the job up or retries it, its deployment state says more than the
        # (previous attempt's) job state.
        settled = self.deployment_status in ("Running", "Complete", "Failed") and self.job_status != "-"
        parts = [f"[{self.job_status if settled else self.deployment_status}]"]
        if self.step is None:
            parts.append("waiting for the first step")
        elif self.total_steps:
            parts.append(f"step {self.step}/{self.total_steps} ({100 * self.step / self.total_steps:.1f}%)")
        else:
            parts.append(f"step {self.step}")
        if self.loss is not None:
            parts.append(f"loss {self.loss:.4f}")
        rate = self.steps_per_s()
        if rate:
            parts.append(f"{rate:.2f} steps/s")
            if self.total_steps and self.step is not None and self.step < self.total_steps:
                parts.append(f"ETA {_duration((self.total_steps - self.step) / rate)}")
        if "val_loss" in self.evaluation:
            ev = f"val loss {self.evaluation['val_loss']:.4f}"
            if "val_perplexity" in self.evaluation:
                ev += f" ppl {self.evaluation['val_perplexity']:.2f}"
            if "val_bits_per_byte" in self.evaluation:
                ev += f" bpb {self.evaluation['val_bits_per_byte']:.3f}"
            parts.append(ev + (f" @{self.eval_step}" if self.eval_step is not None else ""))
        if self.last_checkpoint is not None:
            parts.append(f"checkpoint @{self.last_checkpoint}")
        if self.resumed_from:
            parts.append(f"resumed {len(self.resumed_from)}x (last from step {self.resumed_from[-1]})")
        if self.failed_attempts:
            parts.append(f"failed attempts {self.failed_attempts}")
        return "  ".join(parts)

    def bar(self, width: int = 20) -> str:
        """``[#####---------------]`` for the share of ``total_steps`` done; "" without a total."""
        if not self.total_steps or self.step is None:
            return ""
        done = min(width, round(width * self.step / self.total_steps))
        return "[" + "#" * done + "-" * (width - done) + "]"

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "job_status": self.job_status,
            "deployment_status": self.deployment_status,
            "failed_attempts": self.failed_attempts,
            "step": self.step,
            "total_steps": self.total_steps,
            "loss": self.loss,
            "last_checkpoint": self.last_checkpoint,
            "evaluation": {"step": self.eval_step, **self.evaluation} if self.evaluation else None,
            "resumed_from": list(self.resumed_from),
            "failures_in_log": self.failures,
            "status_message": self.message,  # the RayJob's; "message" is the display line
        }


def _duration(seconds: float) -> str:
    s = int(seconds)
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


@dataclass
class ServiceProgress:
    """A RayService rollout: done when its Ready condition is True."""

    name: str
    service_status: str | None = None  # None: not observed yet
    ready: bool = False
    applications: dict[str, str] = field(default_factory=dict)

    def observe_status(self, rayservice: dict[str, Any]) -> list[str]:
        from ops.kuberay import summarize_rayservice

        s = summarize_rayservice(rayservice)
        out = []
        if self.service_status is None or (s["service_status"], s["ready"]) != (self.service_status, self.ready):
            out.append(
                f"{self.name}: {self.service_status or '-'} -> {s['service_status']}, ready={'yes' if s['ready'] else 'no'}"
                + (f" ({s['ready_reason']})" if s["ready_reason"] else "")
            )
        for app, state in s["applications"].items():
            if self.applications.get(app) != state:
                out.append(f"{self.name}: application {app} {self.applications.get(app, '-')} -> {state}")
        self.service_status, self.ready, self.applications = s["service_status"], s["ready"], s["applications"]
        return out

    def line(self) -> str:
        apps = ", ".join(f"{k}={v}" for k, v in self.applications.items()) or "no applications yet"
        return f"[{self.service_status or '-'}] ready={'yes' if self.ready else 'no'}  {apps}"
