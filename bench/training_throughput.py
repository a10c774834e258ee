"""Ray Train throughput vs plain PyTorch DDP, measured in one run.

Both sides train the same GPT (workloads.common.model) on the same data with 2 workers on CPU
(gloo), the same steps, the same metrics cadence (an all-reduced loss every `report_every`
steps) and the same checkpoint cadence (the same checkpoint.save, with manifest, then a
barrier). The Ray side is the production `train_func` (ray.train.report every `report_every`
steps, asynchronous checkpoint upload) on a fresh local cluster (head with 0 CPUs, one worker
node with 2 CPUs), stopped after each run; the DDP side is `torch.distributed` with two
processes and no Ray process running.

The runs are sequential and interleaved (DDP, Ray, then Ray, DDP, ...; `--repeats` pairs per
config, 3 by default: the median is then not just the mean of two, and the lowest and highest
pair are printed as the spread). An earlier version ran both at the same time so that they
shared the machine's background noise; on a quiet machine that is the wrong comparison: four
training processes on two cores, and every CPU-second Ray's own processes use is taken from both
sides alike instead of from Ray alone (concurrent 0.79 vs sequential 0.93-0.95 on the same quiet
machine, 2026-12-02; bench/README.md, "Training").

Besides tokens/s it prints, per Ray run, the CPU milliseconds per step of rank 0 on each side
and of every other Ray process (from /proc, split by head node, worker node and driver), the
time spent inside `ray.train.report()`, and for both sides the CPU the rest of the machine used
during the measured window ("other load", in cores: other sessions' work that did not wait
for the CPU lock), so that a disturbed pair shows as such.

    python bench/training_throughput.py [--steps 150] [--repeats 3] [--configs ...]
        [--ray-env RAY_TRAIN_HEALTH_CHECK_INTERVAL_S=2 ...] [--mirror-head]

Ray runs with the RayJob's environment (workloads.training.manifest.RAY_ENV) plus
workloads.training.settings.LOCAL_RAY_ENV (a 0.5 s Train controller poll: with Ray's 2 s
default, reports every 10 steps here come faster than the controller takes them and report()
paces training; see there), plus any --ray-env.

`--mirror-head` puts the head node, every process it starts and the driver into a cgroup with
the lowest CPU weight, and starts a log monitor on the worker node: the topology of the cluster,
where the head pod runs on the `system` nodes and a GPU node runs only its workers, raylet,
agents and log monitor. Print both figures, never only this one.

The bf16 H200 benchmark (tokens/s and MFU) needs a GPU; none was lent to this task, so it is
not measured here (see README).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MODEL = {"n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 128}
BATCH = 8
CONFIGS = {  # name: (report_every, checkpoint_every or None)
    "no reports": (10**9, None),
    "metrics every 10": (10, None),
    "metrics every 10 + checkpoint every 50": (10, 50),
}


def ddp_worker(rank: int, world: int, port: int, steps: int, warmup: int, report_every: int,
               ckpt_every: int | None, storage: str, out: str) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"  # as Ray sets it for a 1-CPU worker
    # Its own session, so its own autogroup (CPU share), at nice 0. Ray's ranks share their
    # node's session with its raylet and agents and run at nice 15 (Ray's worker niceness);
    # alone on the two cores, as here, either way each rank has a core (bench/README.md).
    os.setsid()
    import torch
    import torch.distributed as dist

    from workloads.common import checkpoint as ckpt
    from workloads.common.model import GPT, GPTConfig
    from workloads.training.data import ByteWindows, DataPosition, load_corpus
    from workloads.training.job import _lr_lambda, _rng_state

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(1234)
    cfg = GPTConfig(**MODEL)
    model = torch.nn.parallel.DistributedDataParallel(GPT(cfg))
    data = ByteWindows(load_corpus(None, 4 << 20), cfg.block_size, 1234)
    pos = DataPosition()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-3, betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _lr_lambda(20, steps))
    window, n = 0.0, 0
    times: list[float] = []
    cpu_at_go = None
    for step in range(steps):
        x, y = data.next_batch(pos, rank=rank, world_size=world, batch_size=BATCH)
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        done = step + 1
        window += loss.item()
        n += 1
        times.append(time.time())
        if done == warmup:
            cpu_at_go = time.process_time()
            if rank == 0:
                open(out + ".go", "w").close()
        want_ckpt = (ckpt_every and done % ckpt_every == 0) or done == steps
        if want_ckpt or done % report_every == 0:
            mean = torch.tensor([window / n])
            dist.all_reduce(mean)
            window, n = 0.0, 0
        if want_ckpt:
            states = [None] * world
            dist.all_gather_object(states, _rng_state())
            if rank == 0:
                ckpt.save(os.path.join(storage, ckpt.dir_name(done)),
                          {"model": model.module.state_dict(), "optimizer": opt.state_dict(),
                           "scheduler": sched.state_dict(), "rng": states},
                          meta={"step": done, "data_position": pos.to_dict()})
            dist.barrier()
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"first_step": 1, "times": times, "tokens_per_step": BATCH * world * cfg.block_size,
                       "cpu_s": time.process_time() - cpu_at_go}, f)
    dist.destroy_process_group()


def _ddp_main(args_json: str) -> None:
    import torch.multiprocessing as mp

    a = json.loads(args_json)
    mp.start_processes(ddp_worker, args=tuple(a), nprocs=2, start_method="spawn")


def _tokens_per_s(t: dict, warmup: int) -> float:
    """Steady-state throughput: from the end of step `warmup` to the end of the last step."""
    times = t["times"][warmup - t["first_step"]:]
    return t["tokens_per_step"] * (len(times) - 1) / (times[-1] - times[0])


def _step_s(t: dict, warmup: int) -> list[float]:
    """Wall seconds of each measured step (for the JSON: where a slow run lost its time)."""
    times = t["times"][warmup - t["first_step"]:]
    return [round(b - a, 4) for a, b in zip(times, times[1:])]


def _cpu_seconds(pids: list[int]) -> dict[int, tuple[str, float]]:
    """CPU seconds (user + system) used so far by each of ``pids``, with a short name."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        out[pid] = (_short_name(cmd), (int(fields[11]) + int(fields[12])) / tick)
    return out


def _machine_cpu_s() -> float:
    """CPU seconds the whole machine has been busy (all cores; /proc/stat: everything but idle
    and iowait)."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(f[:8]) - f[3] - f[4]) / os.sysconf("SC_CLK_TCK")


class Window:
    """CPU over a run's measured window (from `<out>.go` to `<out>`): per process of the run and
    for the whole machine. What the machine used besides the run's own processes (other
    sessions, the kernel) is `foreign_cores`, the disturbance this run saw."""

    def __init__(self, out: str, pids, alive) -> None:
        while not os.path.exists(out + ".go") and alive():
            time.sleep(0.05)
        self.t0, self.m0, self.c0 = time.time(), _machine_cpu_s(), _cpu_seconds(pids())
        while not os.path.exists(out) and alive():
            time.sleep(0.05)
        self.t1, self.m1, self.c1 = time.time(), _machine_cpu_s(), _cpu_seconds(pids())

    def by_pid(self) -> dict[int, tuple[str, float]]:
        return {pid: (name, c1 - self.c0.get(pid, (name, 0.0))[1]) for pid, (name, c1) in self.c1.items()}

    def foreign_cores(self) -> float:
        own = sum(c for _, c in self.by_pid().values())
        return max(0.0, (self.m1 - self.m0) - own) / max(1e-9, self.t1 - self.t0)


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


CGROUP_CPU = Path("/sys/fs/cgroup/cpu")  # cgroup v1 `cpu` controller, as mounted on this machine
HEAD_CPU_SHARES = 2  # the minimum: the head's processes get a core only when the ranks leave it idle


class HeadCgroup:
    """--mirror-head: a cgroup with the lowest CPU weight for the head node, everything it
    starts, and this driver (in a RayJob the driver runs in the head pod too), so that they do
    not take CPU from the ranks, as on the cluster, where the head pod runs on the `system`
    nodes and the GPU nodes run only the workers, their raylet, agents and log monitor."""

    def __init__(self) -> None:
        if not (CGROUP_CPU / "cpu.shares").exists():
            raise SystemExit(f"--mirror-head needs the cgroup v1 cpu controller at {CGROUP_CPU}")
        self.path = CGROUP_CPU / f"hpray-bench-head-{os.getpid()}"

    def __enter__(self) -> "HeadCgroup":
        self.path.mkdir(exist_ok=True)
        (self.path / "cpu.shares").write_text(str(HEAD_CPU_SHARES))
        return self

    def join(self) -> None:
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def leave(self) -> None:
        (CGROUP_CPU / "cgroup.procs").write_text(str(os.getpid()))

    def __exit__(self, *exc) -> None:
        self.leave()
        for _ in range(50):  # the cluster's processes are gone (stopped) or about to be
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)


def ray_run(steps: int, warmup: int, report_every: int, ckpt_every: int | None, ray_env: dict,
            mirror_head: bool = False) -> dict:
    """One Ray Train run on its own fresh local cluster (head with 0 CPUs for the controller, one
    worker node with 2 CPUs for the 2 workers), stopped afterwards so that no Ray process is
    left running during the DDP runs. CPU seconds of every Ray process over the measured
    steps come from /proc."""
    import contextlib

    import ray

    from workloads.common.local_cluster import LocalCluster, _descendants
    from workloads.training import settings as S
    from workloads.training.job import run

    saved_env = {k: os.environ.get(k) for k in ray_env}
    os.environ.update(ray_env)  # the driver too (Train reads some settings where trainer.fit runs)
    with tempfile.TemporaryDirectory() as d, (HeadCgroup() if mirror_head else contextlib.nullcontext()) as cg:
        cluster = LocalCluster(worker_nodes=1, cpus_per_node=2, dashboard=False, env_extra=ray_env,
                               head_cgroup=str(cg.path) if cg else None, worker_log_monitor=bool(cg))
        out = os.path.join(d, "ray.json")
        s = S.for_local({"model": MODEL, "steps": steps, "batch_size_per_worker": BATCH,
                         "report_every_steps": report_every, "checkpoint_every_steps": ckpt_every or steps,
                         "storage_shared": True, "timing_file": out, "timing_from_step": warmup,
                         "placement_strategy": "PACK", "run_name": "bench"}, storage_path=os.path.join(d, "ckpt"))
        t_start = time.time()
        try:
            if cg:
                cg.join()
            cluster.start()
            os.environ["RAY_ADDRESS"] = cluster.address
            ray.init(address=cluster.address, logging_level=logging.WARNING, log_to_driver=False)
            pids = lambda: [os.getpid()] + [p for n in cluster.nodes for p in [n.proc.pid, *_descendants(n.proc.pid)]]
            box = {}
            t = threading.Thread(target=lambda: box.setdefault("r", run(s)), daemon=True)
            t.start()
            w = Window(out, pids, t.is_alive)
            head_pids = set(_descendants(cluster.nodes[0].proc.pid))
            t.join()
            if box["r"].error:
                raise RuntimeError(f"Ray Train run failed: {box['r'].error}")
            timing = json.loads(Path(out).read_text())
        finally:
            ray.shutdown()
            cluster.stop()
            if cg:
                cg.leave()
            for k, v in saved_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    head_side = {pid for pid in w.c1 if pid == cluster.nodes[0].proc.pid or pid in head_pids}
    by_name: dict[str, float] = {}
    by_node = {"head node": 0.0, "worker node": 0.0, "driver": 0.0}
    for pid, (name, c) in w.by_pid().items():
        node = "driver" if pid == os.getpid() else "head node" if pid in head_side else "worker node"
        if name != "train workers":
            by_node[node] += c
        key = ("driver (trainer.fit)" if pid == os.getpid() else
               f"{name} (worker node)" if node == "worker node" and name != "train workers" else name)
        by_name[key] = by_name.get(key, 0.0) + c
    n_steps = len(timing["times"]) - (warmup - timing["first_step"]) - 1
    return {"tokens_per_s": _tokens_per_s(timing, warmup), "timing": timing, "steps_measured": n_steps,
            "cpu_s_by_process": by_name, "cpu_s_by_node": by_node, "report_s": timing["report_s"],
            "reports": timing["reports"], "foreign_cores": w.foreign_cores(), "wall_s": time.time() - t_start}


def ddp_run(steps: int, warmup: int, report_every: int, ckpt_every: int | None) -> dict:
    from workloads.common.local_cluster import _descendants, free_port

    t_start = time.time()
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "ddp.json")
        os.makedirs(os.path.join(d, "ddp"))
        args = [2, free_port(), steps, warmup, report_every, ckpt_every, os.path.join(d, "ddp"), out]
        proc = subprocess.Popen([sys.executable, __file__, "--ddp-child", json.dumps(args)],
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        try:
            w = Window(out, lambda: [os.getpid(), proc.pid, *_descendants(proc.pid)], lambda: proc.poll() is None)
        finally:
            rc = proc.wait()
        if rc:
            raise RuntimeError(f"DDP run failed: rc={rc}")
        timing = json.loads(Path(out).read_text())
    return {"tokens_per_s": _tokens_per_s(timing, warmup), "timing": timing,
            "foreign_cores": w.foreign_cores(), "wall_s": time.time() - t_start}


def _stall_pct(t: dict, ckpt_every: int | None) -> float | None:
    """Extra wall time of the steps right after a checkpoint, as % of the run (same run)."""
    if not ckpt_every:
        return None
    first, times = t["first_step"], t["times"]
    dts = {first + i: times[i] - times[i - 1] for i in range(1, len(times))}  # step -> its duration
    after_ckpt = {k for k in dts if (k - 1) % ckpt_every == 0}
    normal = sorted(v for k, v in dts.items() if k not in after_ckpt)
    median = normal[len(normal) // 2]
    extra = sum(max(0.0, dts[k] - median) for k in after_ckpt)
    return 100 * extra / sum(dts.values())


def _env_pairs(pairs: list[str]) -> dict:
    out = {}
    for pair in pairs:
        k, sep, v = pair.partition("=")
        if not sep or not k:
            raise SystemExit(f"--ray-env {pair!r}: expected NAME=VALUE, e.g. RAY_TRAIN_HEALTH_CHECK_INTERVAL_S=1")
        out[k] = v
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3, help="DDP/Ray pairs per config (medians reported)")
    p.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset of: " + ", ".join(CONFIGS))
    p.add_argument("--ray-env", action="append", default=[], metavar="NAME=VALUE",
                   help="environment of every Ray process (and the driver), on top of "
                        "workloads.training.settings.LOCAL_RAY_ENV, e.g. RAY_TRAIN_HEALTH_CHECK_INTERVAL_S=2")
    p.add_argument("--mirror-head", action="store_true",
                   help="run the head node, its processes and the driver at the lowest CPU weight "
                        "(a cgroup), as if on other machines like the cluster's `system` nodes; "
                        "a worker-node log monitor runs as on the cluster")
    p.add_argument("--out", default=str(REPO / "out" / "bench" / "training_throughput.json"))
    p.add_argument("--ddp-child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.ddp_child:
        _ddp_main(args.ddp_child)
        return 0
    from workloads.training.manifest import RAY_ENV
    from workloads.training.settings import LOCAL_RAY_ENV

    # What the RayJob ships (manifest.RAY_ENV), then the local settings (the controller's poll:
    # see LOCAL_RAY_ENV), then --ray-env; --ray-env RAY_TRAIN_HEALTH_CHECK_INTERVAL_S=2 measures
    # with Ray's default poll, --ray-env RAY_TRAIN_ENABLE_PREEMPTION_WATCHER=1 with the watcher.
    ray_env = {**RAY_ENV, **LOCAL_RAY_ENV, **_env_pairs(args.ray_env)}

    print("bf16 on an H200: NOT MEASURED (no GPU machine was lent to this task)", flush=True)
    print(f"one at a time, interleaved (DDP, Ray, Ray, DDP, ...), {args.repeats} pair(s) per config, "
          f"{args.steps} steps, tokens/s from step {args.warmup} to the last; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; Ray env {ray_env or 'defaults'}", flush=True)
    rows = []
    for name in args.configs.split(","):
        report_every, ckpt_every = CONFIGS[name]
        for r in range(args.repeats):
            order = ("ddp", "ray") if r % 2 == 0 else ("ray", "ddp")  # cancels slow drifts
            m = {}
            for side in order:
                m[side] = (ddp_run(args.steps, args.warmup, report_every, ckpt_every) if side == "ddp" else
                           ray_run(args.steps, args.warmup, report_every, ckpt_every, ray_env, args.mirror_head))
            ray_m, ddp_m = m["ray"], m["ddp"]
            n = ray_m["steps_measured"]
            cpu = ray_m["cpu_s_by_process"]
            others = {k: v for k, v in cpu.items() if k != "train workers"}
            row = {"config": name, "repeat": r, "order": order, "ddp_tokens_per_s": ddp_m["tokens_per_s"],
                   "ray_tokens_per_s": ray_m["tokens_per_s"], "ratio": ray_m["tokens_per_s"] / ddp_m["tokens_per_s"],
                   "ddp_rank0_cpu_ms_per_step": 1000 * ddp_m["timing"]["cpu_s"] / n,
                   "ray_rank0_cpu_ms_per_step": 1000 * ray_m["timing"]["cpu_s"] / n,
                   "ray_other_cpu_ms_per_step": {k: 1000 * v / n for k, v in sorted(others.items(), key=lambda kv: -kv[1])},
                   "ray_other_cpu_ms_per_step_by_node": {k: 1000 * v / n for k, v in ray_m["cpu_s_by_node"].items()},
                   "ray_report_ms_mean": 1000 * ray_m["report_s"] / max(1, ray_m["reports"]),
                   "ray_reports": ray_m["reports"], "ray_report_s_total": ray_m["report_s"],
                   "ddp_checkpoint_stall_pct": _stall_pct(ddp_m["timing"], ckpt_every),
                   "ray_checkpoint_stall_pct": _stall_pct(ray_m["timing"], ckpt_every),
                   "ddp_foreign_cores": ddp_m["foreign_cores"], "ray_foreign_cores": ray_m["foreign_cores"],
                   "ddp_wall_s": ddp_m["wall_s"], "ray_wall_s": ray_m["wall_s"],
                   "utc": time.strftime("%H:%M:%S", time.gmtime()), "load_average": os.getloadavg(),
                   "ddp_step_s": _step_s(ddp_m["timing"], args.warmup), "ray_step_s": _step_s(ray_m["timing"], args.warmup)}
            rows.append(row)
            top = ", ".join(f"{k} {v:.1f}" for k, v in list(row["ray_other_cpu_ms_per_step"].items())[:5])
            print(f"{name:40s} DDP {row['ddp_tokens_per_s']:6.0f} tok/s  Ray {row['ray_tokens_per_s']:6.0f} tok/s  "
                  f"ratio {row['ratio']:.3f}  | CPU ms/step rank 0: DDP {row['ddp_rank0_cpu_ms_per_step']:.1f} "
                  f"Ray {row['ray_rank0_cpu_ms_per_step']:.1f}; Ray's other processes {sum(others.values()) * 1000 / n:.1f} "
                  f"(" + ", ".join(f"{k} {v:.1f}" for k, v in row["ray_other_cpu_ms_per_step_by_node"].items()) + f"; {top}) | in report(): {row['ray_report_ms_mean']:.1f} ms x {row['ray_reports']}"
                  f" | other load (cores) DDP {row['ddp_foreign_cores']:.2f} Ray {row['ray_foreign_cores']:.2f}"
                  f" | {row['utc']} UTC, load {row['load_average'][0]:.2f}, {row['ddp_wall_s']:.0f} + {row['ray_wall_s']:.0f} s", flush=True)
    summary = {}
    for name in dict.fromkeys(r["config"] for r in rows):
        rs = [r for r in rows if r["config"] == name]
        summary[name] = {"ratio": statistics.median(r["ratio"] for r in rs),
                         "ratio_min": min(r["ratio"] for r in rs), "ratio_max": max(r["ratio"] for r in rs),
                         "ratios": [r["ratio"] for r in rs],
                         "ddp_tokens_per_s": statistics.median(r["ddp_tokens_per_s"] for r in rs),
                         "ray_tokens_per_s": statistics.median(r["ray_tokens_per_s"] for r in rs)}
        stall = [r["ray_checkpoint_stall_pct"] for r in rs if r["ray_checkpoint_stall_pct"] is not None]
        if stall:
            summary[name]["ray_checkpoint_stall_pct"] = statistics.median(stall)
            summary[name]["ddp_checkpoint_stall_pct"] = statistics.median(r["ddp_checkpoint_stall_pct"] for r in rs)
    print(f"median Ray/DDP ratio per config (goal >= 0.97), [lowest, highest] of the {args.repeats} pairs"
          f"{', head mirrored off the ranks (--mirror-head)' if args.mirror_head else ', default topology'}: " +
          ", ".join(f"{k}: {v['ratio']:.3f} [{v['ratio_min']:.3f}, {v['ratio_max']:.3f}]" for k, v in summary.items()))
    for k, v in summary.items():
        if "ray_checkpoint_stall_pct" in v:
            print(f"step-time stall from checkpoints ({k}; extra time of the steps right after a checkpoint, "
                  f"same run): Ray {v['ray_checkpoint_stall_pct']:.1f} %, DDP {v['ddp_checkpoint_stall_pct']:.1f} % (goal <= 5 %)")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"rows": rows, "summary": summary, "steps": args.steps,
                                          "warmup": args.warmup, "ray_env": ray_env, "mirror_head": args.mirror_head,
                                          "model": MODEL, "batch_per_worker": BATCH}, indent=2))
    return 0


if __name__ == "__main__":
    import signal

    # `timeout` sends SIGTERM: exit through the finally blocks, so the local cluster is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main())
