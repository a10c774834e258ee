"""CPU over a benchmark run's measured window, from /proc (workloads.common.procfs): per process
of the run, for the whole machine (what else ran: ``foreign_cores``), and the scheduling of the
ranks' training threads (on a core, waiting for one, sleeping). Used by training_throughput.py."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterable
from typing import Any

from workloads.common import procfs

Sched = tuple[float, float, int, int]  # procfs.thread_sched
NamedSched = tuple[float, float, int, int, str]  # and the thread's name


def cpu_seconds_by_pid(pids: list[int]) -> dict[int, tuple[str, float]]:
    """CPU seconds (user + system) used so far by each of ``pids``, with a short name."""
    out = {}
    for pid in pids:
        cpu = procfs.cpu_seconds(pid)
        cmd = procfs.argv(pid)  # read second: None when the process ended before either read
        if cmd is not None:
            out[pid] = (_short_name(cmd), cpu)
    return out


class Window:
    """CPU over a run's measured window (from `<out>.go` to `<out>`): per process of the run and
    for the whole machine. What the machine used besides the run's own processes (other
    sessions, the kernel) is `foreign_cores`, the disturbance this run saw."""

    def __init__(
        self, out: str, pids: Callable[[], list[int]], alive: Callable[[], bool], wakeups: bool = False
    ) -> None:
        while not os.path.exists(out + ".go") and alive():
            time.sleep(0.05)
        self.t0, self.m0, self.c0 = time.time(), procfs.machine_busy_seconds(), cpu_seconds_by_pid(pids())
        # --wakeups: every thread of the run at both ends (~0.1 s of one core in a Ray run, at
        # the window's start: it costs Ray's side more than DDP's, so only on request).
        self.s0 = _sched(self.c0) if wakeups else {}
        # The ranks' training threads: in each of the two processes busiest over the first
        # second, its busiest thread over the next 0.2 s; then sampled every 0.2 s to the end
        # (a Ray rank's training thread ends with the run, before the window's end is seen).
        # (pid, tid): first, t, last
        self.tracked: dict[tuple[int, int], tuple[NamedSched, float, Sched | NamedSched]] = {}
        self._pending: tuple[float, dict[int, dict[int, NamedSched]]] | None = None
        next_sample = self.t0 + 1.0
        while not os.path.exists(out) and alive():
            time.sleep(0.05)
            if time.time() >= next_sample:
                self._sample()
                next_sample = time.time() + 0.2
        self.t1, self.m1, self.c1 = time.time(), procfs.machine_busy_seconds(), cpu_seconds_by_pid(pids())
        self.s1 = _sched(self.c1) if wakeups else {}

    def by_pid(self) -> dict[int, tuple[str, float]]:
        return {pid: (name, c1 - self.c0.get(pid, (name, 0.0))[1]) for pid, (name, c1) in self.c1.items()}

    def wakeups_per_s(self) -> dict[str, float]:
        """Wake-ups per second of each process of the run other than the ranks' training
        threads (its threads' voluntary context switches over the window, threads alive at both
        ends): on two busy cores, every wake-up takes a core from a rank for a moment."""
        return _top(self.wakeups_by_thread(), lambda k: k.split(" / ")[0])

    def wakeups_by_thread(self) -> dict[str, float]:
        """The same per process and thread name ("process / thread", summed over same names)."""
        ranks = set(self.tracked)
        out: dict[str, float] = {}
        for pid, threads in self.s1.items():  # empty without --wakeups
            name = self.c1.get(pid, ("?", 0))[0]
            for tid, v in threads.items():
                if tid not in self.s0.get(pid, {}) or (pid, tid) in ranks:
                    continue
                key = f"{name} / {v[4]}"
                out[key] = out.get(key, 0.0) + (v[3] - self.s0[pid][tid][3]) / max(1e-9, self.t1 - self.t0)
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def _sample(self) -> None:
        if self._pending is None:  # the two busiest processes so far, all their threads
            now = cpu_seconds_by_pid(list(self.c0))
            busiest = sorted(now, key=lambda pid: -(now[pid][1] - self.c0[pid][1]))[:2]
            self._pending = (time.time(), _sched(busiest))
            return
        if not self.tracked:  # in each, the thread busiest since: the training thread
            t, first = self._pending
            for pid, threads in _sched(list(first)).items():
                both = [tid for tid in threads if tid in first[pid]]
                if both:
                    tid = max(both, key=lambda x: threads[x][0] - first[pid][x][0])
                    self.tracked[(pid, tid)] = (first[pid][tid], time.time(), threads[tid])
            self._t_first = t
            return
        for (pid, tid), (start, _, _) in list(self.tracked.items()):
            v = procfs.thread_sched(pid, tid)
            if v:
                self.tracked[(pid, tid)] = (start, time.time(), v)

    def ranks_sched(self) -> dict[str, Any]:
        """The ranks' training threads (see __init__) from about a second into the window to
        their last sample, averaged over both ranks: % of wall time on a core, runnable but
        waiting for one (run-queue delay), and neither (sleeping: waiting for the other rank, a
        reply, I/O), and involuntary context switches (preemptions) per second."""
        parts = []
        for first, t, last in self.tracked.values():
            wall = max(1e-9, t - self._t_first)
            on, wait = last[0] - first[0], last[1] - first[1]
            parts.append(
                {
                    "on_core_pct": 100 * on / wall,
                    "waiting_for_core_pct": 100 * wait / wall,
                    "sleeping_pct": 100 * max(0.0, wall - on - wait) / wall,
                    "preemptions_per_s": (last[2] - first[2]) / wall,
                }
            )
        if not parts:
            return {}
        return {k: statistics.mean(p[k] for p in parts) for k in parts[0]}

    def foreign_cores(self) -> float:
        own = sum(c for _, c in self.by_pid().values())
        return max(0.0, (self.m1 - self.m0) - own) / max(1e-9, self.t1 - self.t0)


def _top(d: dict[str, float], group: Callable[[str], str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for k, v in d.items():
        out[group(k)] = out.get(group(k), 0.0) + v
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _sched(pids: Iterable[int]) -> dict[int, dict[int, NamedSched]]:
    """procfs.thread_sched of every thread of every process in ``pids`` that is alive, and the
    thread's name."""
    out = {}
    for pid in pids:
        if tids := procfs.threads(pid):
            out[pid] = {
                tid: (*v, procfs.thread_name(pid, tid) or "?") for tid in tids if (v := procfs.thread_sched(pid, tid))
            }
    return out


def _short_name(cmd: list[bytes]) -> str:
    first = cmd[0].decode(errors="replace")
    if first.startswith("ray::"):  # actors and Ray's own agents
        name = first[5:].split(".")[0].split(":")[0]
        return {"RayTrainWorker": "train workers"}.get(name, name)
    words = [c.decode(errors="replace") for c in cmd if c]
    for w in words:
        base = os.path.basename(w)
        if base in ("gcs_server", "raylet"):
            return base
        if base.endswith(".py") and base not in ("setup_worker.py",):
            return base[:-3]
        if w in ("ray.util.client.server",):
            return "client server"
    return os.path.basename(words[0]) if words else "?"
