"""Processes through Linux's /proc: the one reader the workloads, rehearsals and benchmarks share
(psutil is importable here only as Ray's vendored copy)."""

from __future__ import annotations

import os
import time
from pathlib import Path


def read(pid: int | str, name: str) -> bytes | None:
    """``/proc/<pid>/<name>``, or None once the process is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read()
    except OSError:
        return None


def cmdline(pid: int | str) -> str:
    return (read(pid, "cmdline") or b"").replace(b"\0", b" ").decode(errors="replace").strip()


def argv(pid: int | str) -> list[bytes] | None:
    """The command line's NUL-separated words (a process that renamed itself, as Ray's workers
    do, has its title as the first); None once the process is gone."""
    raw = read(pid, "cmdline")
    return raw.split(b"\0") if raw is not None else None


def cpu_seconds(pid: int | str) -> float:
    """User + system CPU time of ``pid`` so far (0 if it is gone)."""
    fields = stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") if fields and len(fields) > 12 else 0.0


def pids() -> list[int]:
    return [int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit()]


def stat_fields(pid: int | str) -> list[str] | None:
    """Fields of ``/proc/<pid>/stat`` after the command name (field 3, the state, is index 0)."""
    raw = read(pid, "stat")
    return raw.decode().rsplit(")", 1)[1].split() if raw else None


def parent(pid: int | str) -> int | None:
    fields = stat_fields(pid)
    return int(fields[1]) if fields else None


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (children, their children, ...)."""
    children: dict[int, list[int]] = {}
    for p in pids():
        ppid = parent(p)
        if ppid is not None:
            children.setdefault(ppid, []).append(p)
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def process_start_time(pid: int | str = "self") -> float:
    """Wall-clock time at which the process started (10 ms; 0.0 when /proc cannot tell)."""
    fields = stat_fields(pid)
    if fields is None:
        return 0.0
    try:
        ticks = int(fields[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
    except (TypeError, OSError, ValueError, IndexError):
        return 0.0
    return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))


def listening_ports(among: list[int] | None = None) -> dict[int, int]:
    """TCP ports (IPv4 and IPv6) in LISTEN state -> the process owning the socket, among the
    processes ``among`` (every process this user can see when None)."""
    inodes: dict[str, int] = {}
    for pid in among if among is not None else pids():
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes[link[8:-1]] = pid
    ports: dict[int, int] = {}
    for table in ("net/tcp", "net/tcp6"):
        for line in (read("self", table) or b"").decode().splitlines()[1:]:
            f = line.split()
            if len(f) > 9 and f[3] == "0A" and f[9] in inodes:  # 0A: LISTEN
                ports[int(f[1].rsplit(":", 1)[1], 16)] = inodes[f[9]]
    return ports


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has been busy so far, all cores together (``/proc/stat``:
    everything but idle and iowait)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return (sum(ticks[:8]) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def children(pid: int | str) -> list[int]:
    """Direct children of ``pid`` (its threads' ``children`` lists; [] once it is gone): cheaper
    than ``descendants`` for sampling one process tree often."""
    out: list[int] = []
    for tid in threads(pid):
        out.extend(int(c) for c in (read(pid, f"task/{tid}/children") or b"").split())
    return out


def rss_kib(pid: int | str) -> int:
    """Resident set size of ``pid`` in KiB (``VmRSS``; 0 once it is gone)."""
    for line in (read(pid, "status") or b"").splitlines():
        if line.startswith(b"VmRSS:"):
            return int(line.split()[1])
    return 0


def peak_rss_kib(pid: int | str = "self") -> int:
    """Highest resident set size of ``pid`` in KiB (``VmHWM``) since it started or since
    ``reset_peak_rss``; 0 once it is gone."""
    for line in (read(pid, "status") or b"").splitlines():
        if line.startswith(b"VmHWM:"):
            return int(line.split()[1])
    return 0


def reset_peak_rss(pid: int | str = "self") -> None:
    """Start ``peak_rss_kib`` again from the current resident set (``clear_refs`` 5)."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


def threads(pid: int | str) -> list[int]:
    """Thread ids of ``pid`` ([] once it is gone)."""
    try:
        return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def thread_name(pid: int | str, tid: int) -> str | None:
    raw = read(pid, f"task/{tid}/comm")
    return raw.decode(errors="replace").strip() if raw is not None else None


def thread_sched(pid: int | str, tid: int) -> tuple[float, float, int, int] | None:
    """One thread so far: seconds on a core, seconds runnable but waiting for one (run-queue
    delay, ``schedstat``), involuntary context switches (preemptions) and voluntary ones (sleeps,
    each followed by a wake-up); None once it ended."""
    sched, status = read(pid, f"task/{tid}/schedstat"), read(pid, f"task/{tid}/status")
    if sched is None or status is None:
        return None
    try:
        on_cpu, wait = sched.split()[:2]
        values = dict(line.partition(b":")[::2] for line in status.splitlines())
        preempt, sleeps = int(values[b"nonvoluntary_ctxt_switches"]), int(values[b"voluntary_ctxt_switches"])
    except (ValueError, KeyError):
        return None
    return int(on_cpu) / 1e9, int(wait) / 1e9, preempt, sleeps


def cgroup(pid: int | str, controller: str) -> str | None:
    """The path of ``pid`` in the cgroup v1 hierarchy of ``controller`` (e.g. ``cpu``); None once
    the process is gone or where no hierarchy has that controller."""
    raw = read(pid, "cgroup")
    for line in (raw or b"").decode().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path
    return None
