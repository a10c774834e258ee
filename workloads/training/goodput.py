"""Goodput: where a training run's wall time goes, from submission to the last step.

Every second of the run is charged to exactly one bucket (``BUCKETS``):

- ``productive``: optimizer steps (data, forward, backward, update) that are not redone later;
- ``redone``: steps done before a failure after the checkpoint the run resumed from, so done
  again after the resume (charged to ``productive`` first, moved here on the resume);
- ``checkpoint``: the loop blocked in a save (state dict, staging, waiting for the previous save);
- ``startup``: from a worker process's start to its first step (imports, process group, model
  build, checkpoint restore, and with ``training.compile`` the blocks' compilation);
- ``waiting``: no worker in the loop: from submission to the first worker's start, and from the
  last record before a failure to the restarted worker's start (failure detection, node
  replacement, scheduling). Work done in the last ``persist_every_s`` before a failure is not
  on record and lands here too;
- ``other``: the rest of the loop (metric reductions, ``ray.train.report``).

Goodput is ``productive`` over the wall time (the sum of the buckets). The charges come from one
clock read per step (``Accounts.charge``), so the buckets add up to the wall time by construction.

The accounts survive restarts: rank 0 writes them with every checkpoint (``meta.json``'s
``goodput`` entry) and, every ``persist_every_s`` (5 s) and at every checkpoint, to
``<run dir>/goodput.json``. A resume continues the newer of the two and moves the productive time
spent after the restored checkpoint's step into ``redone``.

Exported (rank 0, at every report) through Ray's metrics API as gauges (not counters: a resume
moves time out of ``productive``): ``ray_train_goodput_seconds{ray_train_run_name, bucket}`` and
``ray_train_goodput_ratio{ray_train_run_name}`` (the whole run's goodput). The names, and the
PromQL of the goodput over a window, live in config/observability.py: the training dashboard's
goodput panels (manifests/dashboards.py) and the ``TrainingGoodputLow`` alert
(constructs/observability.py) use them.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from config.observability import (
    TRAIN_GOODPUT_BUCKETS,
    TRAIN_GOODPUT_RATIO,
    TRAIN_GOODPUT_RUN_LABEL,
    TRAIN_GOODPUT_SECONDS,
)

BUCKETS = TRAIN_GOODPUT_BUCKETS
log = logging.getLogger("workloads.training")

LEDGER_FILE = "goodput.json"
# Checkpoint steps whose productive total is kept (a resume from an older one estimates).
_KEEP_MARKS = 64


class Accounts:
    """The run's buckets, continued across attempts. Pure python: the clock is injected.

    ``last`` is the time up to which every second has been charged; ``charge(bucket)`` charges
    the seconds since then to ``bucket``."""

    def __init__(self, *, submitted: float, clock: Callable[[], float] = time.time):
        self.clock = clock
        self.submitted = submitted
        self.seconds = dict.fromkeys(BUCKETS, 0.0)
        self.last = submitted
        self.step = 0  # the highest step done
        self.marks: dict[int, float] = {}  # checkpoint step -> productive seconds when it was taken
        self.attempts = 0

    # -- charging ------------------------------------------------------------------------------

    def charge(self, bucket: str, until: float | None = None) -> float:
        """Charge the seconds from ``last`` to ``until`` (now) to ``bucket``; returns them."""
        now = self.clock() if until is None else until
        dt = max(0.0, now - self.last)
        self.seconds[bucket] += dt
        self.last = max(self.last, now)
        return dt

    def step_done(self, step: int) -> None:
        """A step finished: the time since the last charge was that step's."""
        self.charge("productive")
        self.step = step

    def checkpoint_taken(self, step: int) -> None:
        """A checkpoint of the state after ``step`` is being written: remember the productive
        total, so that a resume from it knows how much productive time came after it."""
        self.marks[step] = self.seconds["productive"]
        for old in sorted(self.marks)[:-_KEEP_MARKS]:
            del self.marks[old]

    # -- resume --------------------------------------------------------------------------------

    def begin_attempt(self, *, process_start: float) -> None:
        """A (re)started worker: from the last record to its process start nobody was in the
        loop (``waiting``); from there to now is start-up and restore (``startup``)."""
        self.attempts += 1
        self.charge("waiting", until=max(self.last, min(process_start, self.clock())))
        self.charge("startup")

    def rewind(self, restored_step: int) -> float:
        """The run resumed from the checkpoint at ``restored_step``: the productive time of the
        steps done after it moves to ``redone``; returns the seconds moved."""
        if self.step <= restored_step:
            self.step = restored_step
            return 0.0
        productive = self.seconds["productive"]
        if restored_step == 0:
            at = 0.0
        elif restored_step in self.marks:
            at = self.marks[restored_step]
        else:  # an older checkpoint than the marks kept: the run's mean step time
            at = productive * restored_step / self.step
        moved = max(0.0, productive - at)
        self.seconds["productive"] -= moved
        self.seconds["redone"] += moved
        self.step = restored_step
        self.marks = {k: v for k, v in self.marks.items() if k <= restored_step}
        return moved

    # -- figures -------------------------------------------------------------------------------

    @property
    def wall(self) -> float:
        return sum(self.seconds.values())

    @property
    def goodput(self) -> float:
        wall = self.wall
        return self.seconds["productive"] / wall if wall > 0 else 0.0

    def summary(self) -> str:
        """One line: goodput and every bucket in seconds."""
        parts = " ".join(f"{b}={self.seconds[b]:.2f}s" for b in BUCKETS)
        return f"goodput={self.goodput:.4f} wall={self.wall:.2f}s {parts}"

    # -- persistence ---------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "submitted": self.submitted,
            "last": self.last,
            "step": self.step,
            "attempts": self.attempts,
            "seconds": dict(self.seconds),
            "marks": {str(k): v for k, v in sorted(self.marks.items())},
            "goodput": self.goodput,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, clock: Callable[[], float] = time.time) -> Accounts:
        a = cls(submitted=float(d["submitted"]), clock=clock)
        a.last = float(d["last"])
        a.step = int(d["step"])
        a.attempts = int(d.get("attempts", 0))
        a.seconds.update({b: float(d["seconds"].get(b, 0.0)) for b in BUCKETS})
        a.marks = {int(k): float(v) for k, v in d.get("marks", {}).items()}
        return a


def newest(*records: dict[str, Any] | None) -> dict[str, Any] | None:
    """Of the saved accounts (the ledger file, a checkpoint's meta), the one recorded last."""
    found = [r for r in records if isinstance(r, dict) and "seconds" in r and "last" in r]
    return max(found, key=lambda r: float(r["last"])) if found else None


def read_ledger(run_dir: str) -> dict[str, Any] | None:
    """``<run_dir>/goodput.json``, or None when absent or unreadable."""
    try:
        with open(os.path.join(run_dir, LEDGER_FILE), "rb") as f:
            data = json.loads(f.read())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_ledger(run_dir: str, record: dict[str, Any]) -> None:
    """Replace ``<run_dir>/goodput.json`` atomically (temporary name, fsync, rename)."""
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, LEDGER_FILE)
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        f.write(json.dumps(record, sort_keys=True).encode())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class Tracker:
    """The job's side: accounts on rank 0 (other ranks step in lockstep and keep none), the
    ledger file, and the Ray gauges. Every method is a no-op when ``enabled`` is false."""

    def __init__(
        self,
        *,
        enabled: bool,
        run_name: str,
        run_dir: str,
        accounts: Accounts | None = None,
        persist_every_s: float = 5.0,
        export: bool = True,
    ):
        self.enabled = enabled
        self.run_name = run_name
        self.run_dir = run_dir
        self.accounts = accounts or Accounts(submitted=time.time())
        self.persist_every_s = persist_every_s
        self.persisted_at = 0.0
        self._gauges: tuple[Any, Any] | None = None
        self._write_failed = False
        self.export = export

    @classmethod
    def begin(
        cls,
        *,
        enabled: bool,
        run_name: str,
        run_dir: str,
        submitted: float | None,
        process_start: float,
        restored_step: int,
        checkpoint_meta: dict[str, Any] | None,
        clock: Callable[[], float] = time.time,
        **kwargs: Any,
    ) -> Tracker:
        """Continue the newest saved accounts (or open new ones at ``submitted``) for an attempt
        that restored ``restored_step`` (0: none) and whose process started at ``process_start``."""
        if not enabled:
            return cls(enabled=False, run_name=run_name, run_dir=run_dir, **kwargs)
        record = newest(read_ledger(run_dir), (checkpoint_meta or {}).get("goodput"))
        if record is None:
            start = submitted if submitted and submitted <= process_start else process_start or clock()
            accounts = Accounts(submitted=start, clock=clock)
        else:
            accounts = Accounts.from_dict(record, clock=clock)
        accounts.begin_attempt(process_start=process_start or accounts.clock())
        accounts.rewind(restored_step)
        return cls(enabled=True, run_name=run_name, run_dir=run_dir, accounts=accounts, **kwargs)

    def step_done(self, step: int) -> None:
        """Charge the step; rewrite the ledger file when ``persist_every_s`` has passed, so that
        a failure leaves at most that much work off the record."""
        if self.enabled:
            self.accounts.step_done(step)
            if self.accounts.last - self.persisted_at >= self.persist_every_s:
                self._persist()

    def charge(self, bucket: str) -> None:
        if self.enabled:
            self.accounts.charge(bucket)

    def checkpoint_record(self, step: int) -> dict[str, Any] | None:
        """Charge the loop's time so far to ``other``, mark the checkpoint at ``step``, and
        return the accounts to store in its meta (None on ranks that keep none)."""
        if not self.enabled:
            return None
        self.accounts.charge("other")
        self.accounts.checkpoint_taken(step)
        return self.accounts.to_dict()

    def publish(self, *, force: bool = False) -> None:
        """Set the gauges; write the ledger file when ``persist_every_s`` has passed (or ``force``)."""
        if not self.enabled:
            return
        a = self.accounts
        if force or a.last - self.persisted_at >= self.persist_every_s:
            self._persist()
        if self.export:
            seconds, ratio = self._metrics()
            for bucket in BUCKETS:
                seconds.set(a.seconds[bucket], tags={TRAIN_GOODPUT_RUN_LABEL: self.run_name, "bucket": bucket})
            ratio.set(a.goodput, tags={TRAIN_GOODPUT_RUN_LABEL: self.run_name})

    def _persist(self) -> None:
        """Write the ledger; a storage error is logged (once) and retried at the next interval,
        never allowed to stop training."""
        self.persisted_at = self.accounts.last
        try:
            write_ledger(self.run_dir, self.accounts.to_dict())
        except OSError as err:
            if not self._write_failed:
                log.warning("goodput: cannot write %s: %s; training goes on", self.run_dir, err)
            self._write_failed = True

    def _metrics(self) -> tuple[Any, Any]:
        if self._gauges is None:
            from ray.util.metrics import Gauge

            self._gauges = (
                Gauge(
                    TRAIN_GOODPUT_SECONDS,
                    description="Wall seconds of a training run per goodput bucket, continued across restarts.",
                    tag_keys=(TRAIN_GOODPUT_RUN_LABEL, "bucket"),
                ),
                Gauge(
                    TRAIN_GOODPUT_RATIO,
                    description="Productive seconds over wall seconds of the training run.",
                    tag_keys=(TRAIN_GOODPUT_RUN_LABEL,),
                ),
            )
        return self._gauges
