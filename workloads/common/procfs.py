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
    try:
        ticks = int(fields[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
    except (TypeError, OSError, ValueError, IndexError):
        return 0.0
    return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
