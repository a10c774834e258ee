"""workloads/common/procfs.py against this test's own process and threads (real /proc)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from workloads.common import procfs

ROOT = Path(__file__).parents[3]
GONE = 2**22 + 1  # above the kernel's pid_max: no such process


def test_cgroup_of_this_process_is_read_from_proc():
    expected = next(
        (
            line.split(":", 2)[2]
            for line in Path("/proc/self/cgroup").read_text().splitlines()
            if "cpu" in line.split(":")[1].split(",")
        ),
        None,
    )  # None under cgroup v2 only
    assert procfs.cgroup(os.getpid(), "cpu") == expected
    assert procfs.cgroup(GONE, "cpu") is None


def test_argv_is_the_command_line_split_on_nul():
    proc = subprocess.Popen(["sleep", "30"])
    try:
        deadline = time.time() + 10
        while procfs.argv(proc.pid) != [b"sleep", b"30", b""] and time.time() < deadline:
            time.sleep(0.01)  # between fork and exec the child still has this interpreter's argv
        assert procfs.argv(proc.pid) == [b"sleep", b"30", b""]
        assert procfs.cmdline(proc.pid) == "sleep 30"
    finally:
        proc.kill()
        proc.wait()
    assert procfs.argv(GONE) is None


def _spin(cpu_seconds: float) -> None:
    """Keep this thread on a core until it has used ``cpu_seconds`` (however busy the machine)."""
    end = time.thread_time() + cpu_seconds
    while time.thread_time() < end:
        pass


def test_a_busy_thread_is_seen_on_a_core():
    first: list = []
    spun, done = threading.Event(), threading.Event()

    def work() -> None:
        first.append(procfs.thread_sched(os.getpid(), threading.get_native_id()))
        _spin(0.3)
        spun.set()
        done.wait(30)

    t = threading.Thread(target=work)
    t.start()
    try:
        assert spun.wait(60)
        assert t.native_id in procfs.threads(os.getpid())
        last = procfs.thread_sched(os.getpid(), t.native_id)
    finally:
        done.set()
        t.join()
    before = first[0]
    assert before is not None and last is not None
    assert last[0] - before[0] >= 0.25  # schedstat counts nanoseconds on a core
    assert last[1] >= before[1]  # so does run-queue delay, and context switches only ever grow
    assert last[2] >= before[2] and last[3] >= before[3]
    assert procfs.thread_sched(os.getpid(), GONE) is None
    assert procfs.threads(GONE) == []


def test_thread_name_is_the_kernels_comm():
    proc = subprocess.Popen(["sleep", "30"])
    try:
        deadline = time.time() + 10
        while procfs.thread_name(proc.pid, proc.pid) != "sleep" and time.time() < deadline:
            time.sleep(0.01)  # comm changes at exec
        assert procfs.thread_name(proc.pid, proc.pid) == "sleep"
    finally:
        proc.kill()
        proc.wait()
    assert procfs.thread_name(GONE, GONE) is None


def test_cpu_seconds_of_a_process_and_of_the_machine_grow_with_work():
    machine0, own0 = procfs.machine_busy_seconds(), procfs.cpu_seconds(os.getpid())
    _spin(0.3)
    # Clock ticks are 10 ms: the 0.3 s used shows as at least 0.25 s.
    assert procfs.cpu_seconds(os.getpid()) - own0 >= 0.25
    assert procfs.machine_busy_seconds() - machine0 >= 0.25
    assert procfs.cpu_seconds(GONE) == 0.0


def test_listening_ports_name_the_owner_of_each_listening_socket():
    with socket.socket() as listening, socket.socket() as bound_only:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        bound_only.bind(("127.0.0.1", 0))
        port, other = listening.getsockname()[1], bound_only.getsockname()[1]
        assert procfs.listening_ports([os.getpid()])[port] == os.getpid()
        assert procfs.listening_ports().get(port) == os.getpid()
        assert other not in procfs.listening_ports([os.getpid()])  # bound, not listening
        assert port not in procfs.listening_ports([1])  # among other processes only
    assert port not in procfs.listening_ports([os.getpid()])


def test_children_and_rss_of_a_process_tree():
    proc = subprocess.Popen(["bash", "-c", "sleep 30 & sleep 30 & wait"])
    try:
        deadline = time.time() + 10
        while len(procfs.children(proc.pid)) < 2 and time.time() < deadline:
            time.sleep(0.01)
        kids = procfs.children(proc.pid)
        assert len(kids) == 2 and all(procfs.parent(k) == proc.pid for k in kids)
        assert sorted(kids) == sorted(procfs.descendants(proc.pid))
        assert procfs.rss_kib(proc.pid) > 0
    finally:
        for kid in procfs.children(proc.pid):
            os.kill(kid, signal.SIGKILL)
        proc.kill()
        proc.wait()
    assert procfs.children(GONE) == [] and procfs.rss_kib(GONE) == 0


def test_peak_rss_follows_an_allocation_and_resets():
    script = (
        "from workloads.common import procfs\n"
        "block = b'x' * (64 << 20)\n"  # written: every page resident
        "del block\n"
        "high = procfs.peak_rss_kib()\n"
        "procfs.reset_peak_rss()\n"
        "print(high, procfs.peak_rss_kib(), procfs.rss_kib('self'))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT)
    high, after_reset, now = (int(x) for x in out.stdout.split())
    assert high - now >= 60 << 10  # the freed 64 MiB still counts in the peak ...
    assert after_reset - now < 8 << 10  # ... until it is reset to the current resident set
    assert procfs.peak_rss_kib(GONE) == 0
