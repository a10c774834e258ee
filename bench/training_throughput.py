"""Ray Train throughput vs plain PyTorch DDP, measured in one run.

Both sides train the same model (workloads.common.model, the job's local shape with MODEL's
sizes) with DDP on the same data with 2 workers on CPU (gloo), the same step
(workloads.training.job.train_step), the same metrics cadence (an all-reduced loss every
`report_every` steps) and the same checkpoints (checkpoint.save_sharded, asynchronous, the
previous one awaited at the next). The Ray side is the production `train_func` (sharding=ddp,
ray.train.report every `report_every` steps) on a fresh local cluster (head with 0 CPUs, one
worker node with 2 CPUs), timed by a step callback (StepTimer), stopped after each run; the DDP
side is `torch.distributed` with two processes and no Ray process running. The time spent
inside `ray.train.report()` is not observable from a step callback and is printed as nan.

The runs are sequential and interleaved (DDP, Ray, then Ray, DDP, ...; `--repeats` pairs per
config, 3 by default: the median is then not just the mean of two, and the lowest and highest
pair are printed as the spread). Running both at the same time would share the machine's
background noise, but on a quiet machine it is the wrong comparison: four training processes on
two cores, and every CPU-second Ray's own processes use is taken from both sides alike instead of
from Ray alone (docs/benchmarks.md, "Training throughput").

Besides tokens/s it prints, per Ray run, the CPU milliseconds per step of rank 0 on each side
and of every other Ray process (from /proc, split by head node, worker node and driver), the
time spent inside `ray.train.report()`, and for both sides the CPU the rest of the machine used
during the measured window ("other load", in cores: other sessions' work that did not wait
for the CPU lock), so that a disturbed pair shows as such, and for the ranks' training threads
on each side the share of their wall time on a core, runnable but waiting for one (run-queue
delay, /proc/<pid>/task/<tid>/schedstat) and sleeping (the other rank, a reply, I/O), and
their preemptions per second: whether a slower step was work, waiting for a core, or waiting
for something else. `--wakeups` adds every thread's wake-ups per second (diagnosis only: reading
every thread costs Ray's side more than DDP's).

    python bench/training_throughput.py [--steps 150] [--repeats 3] [--configs ...]
        [--ray-env RAY_TRAIN_HEALTH_CHECK_INTERVAL_S=2 ...] [--mirror-head]
        [--variant LABEL: --variant LABEL:NAME=VALUE[,NAME=VALUE] ...] [--wakeups]

`--variant` (two or more) is an A/B of Ray settings in one run: every block runs DDP once and
Ray once per variant (DDP first, then last; the variants' order turns every two blocks), each
variant's ratio is against its block's DDP run, and the variants are also compared with each
other block by block (the first one given is the reference).

Ray runs with the RayJob's environment (manifests.training.RAY_ENV) plus
workloads.training.settings.LOCAL_RAY_ENV (a 0.5 s Train controller poll: with Ray's 2 s
default, reports every 10 steps here come faster than the controller takes them and report()
paces training; see there), plus any --ray-env.

`--mirror-head` puts the head node, every process it starts and the driver into a cgroup with
the lowest CPU weight, starts the worker node (and so the ranks) outside it, and starts a log
monitor on the worker node: the topology of the cluster, where the head pod runs on the `system`
nodes and a GPU node runs only its workers, raylet, agents and log monitor. Right after the
cluster starts, every node's processes are checked to be in the right cgroup, and the bench
stops if one is not (a worker node that inherits the driver's cgroup mirrors nothing). Print
both figures, never only this one.

The bf16 benchmark on one GPU (tokens/s and MFU) is bench/training_gpu.py.

The CPU accounting over a run is bench/cpu_window.py and --mirror-head's cgroup
bench/head_cgroup.py. This module stays one because its two sides (the DDP reference and the Ray
run) and the pairing that makes them comparable only make sense read together.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workloads.training.job import StepInfo

Row = dict[str, Any]  # one interleaved pair: the config, the variant, both sides' figures
Variants = list[tuple[str, dict[str, str]]]  # (label, Ray env added to the shipped one)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.cpu_window import Window  # noqa: E402
from bench.head_cgroup import HeadCgroup  # noqa: E402
from workloads.common import procfs  # noqa: E402

MODEL = {"n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 128}
BATCH = 8
CONFIGS = {  # name: (report_every, checkpoint_every or None)
    "no reports": (10**9, None),
    "metrics every 10": (10, None),
    "metrics every 10 + checkpoint every 50": (10, 50),
}


class StepTimer:
    """The step callback of the Ray side (``run(..., step_callback=)``): on rank 0, the wall time
    at the end of every step, ``<out>.go`` after step ``warmup``, and at the last step
    {first_step, times, tokens_per_step, cpu_s (this process's CPU seconds from step ``warmup``
    on)} written to ``out``, as the DDP side writes it."""

    def __init__(self, out: str, warmup: int):
        self.out, self.warmup = out, warmup
        self.times: list[float] = []
        self.first_step: int | None = None
        self.cpu_at_go = 0.0

    def __call__(self, info: StepInfo) -> None:
        if info.rank != 0:
            return
        self.times.append(time.time())
        self.first_step = self.first_step or info.step
        if info.step == self.warmup:
            self.cpu_at_go = time.process_time()
            open(self.out + ".go", "w").close()
        if info.last:
            with open(self.out, "w") as f:
                json.dump(
                    {
                        "first_step": self.first_step,
                        "times": self.times,
                        "tokens_per_step": info.tokens,
                        "cpu_s": time.process_time() - self.cpu_at_go,
                    },
                    f,
                )


def ddp_worker(
    rank: int,
    world: int,
    port: int,
    steps: int,
    warmup: int,
    report_every: int,
    ckpt_every: int | None,
    storage: str,
    out: str,
    model_config: dict[str, Any],
) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"  # as Ray sets it for a 1-CPU worker
    # Its own session, so its own autogroup (CPU share), at nice 0. Ray's ranks share their
    # node's session with its raylet and agents and run at nice 15 (Ray's worker niceness);
    # alone on the two cores, as here, either way each rank has a core (bench/README.md).
    os.setsid()
    import torch
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import get_state_dict

    from workloads.common import checkpoint as ckpt
    from workloads.common.model import build, config_from_dict
    from workloads.training.checkpointer import rng_state
    from workloads.training.data import ByteWindows, DataPosition, load_corpus
    from workloads.training.job import lr_schedule, make_optimizer, train_step

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(1234)
    cfg = config_from_dict(model_config)
    model = torch.nn.parallel.DistributedDataParallel(build(cfg))
    ckpt_group = dist.new_group(backend="gloo")
    pending = None
    data = ByteWindows(load_corpus(None, 4 << 20), cfg.block_size, 1234)
    pos = DataPosition()
    opt = make_optimizer(model, learning_rate=3e-3, weight_decay=0.1, fused=False)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_schedule(20, steps))
    window, n = 0.0, 0
    times: list[float] = []
    cpu_at_go: float | None = None
    for step in range(steps):
        x, y = data.next_batch(pos, rank=rank, world_size=world, batch_size=BATCH)
        loss = train_step(model, opt, sched, x, y, grad_clip=1.0)
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
            # As the job: the previous save finishes in the background; this one is staged.
            if pending is not None:
                pending.result()
            states = [None] * world
            dist.all_gather_object(states, rng_state())
            model_sd, optim_sd = get_state_dict(model, opt)
            pending = ckpt.save_sharded(
                os.path.join(storage, ckpt.dir_name(done)),
                {
                    "model": model_sd,
                    "optim": optim_sd,
                    "progress": pickle.dumps(
                        {"step": done, "data_position": pos.to_dict(), "rng": states, "scheduler": sched.state_dict()}
                    ),
                },
                {"step": done, "data_position": pos.to_dict()},
                process_group=ckpt_group,
            )
            if done == steps:
                pending.result()
    if rank == 0:
        assert cpu_at_go is not None, "warmup is a step of the run (1 <= warmup <= steps)"
        with open(out, "w") as f:
            json.dump(
                {
                    "first_step": 1,
                    "times": times,
                    "tokens_per_step": BATCH * world * cfg.block_size,
                    "cpu_s": time.process_time() - cpu_at_go,
                },
                f,
            )
    dist.destroy_process_group()


def _ddp_main(args_json: str) -> None:
    import torch.multiprocessing as mp

    a = json.loads(args_json)
    mp.start_processes(ddp_worker, args=tuple(a), nprocs=2, start_method="spawn")


def _tokens_per_s(t: dict[str, Any], warmup: int) -> float:
    """Steady-state throughput: from the end of step `warmup` to the end of the last step."""
    times = t["times"][warmup - t["first_step"] :]
    rate: float = t["tokens_per_step"] * (len(times) - 1) / (times[-1] - times[0])
    return rate


def _step_s(t: dict[str, Any], warmup: int) -> list[float]:
    """Wall seconds of each measured step (for the JSON: where a slow run lost its time)."""
    times = t["times"][warmup - t["first_step"] :]
    return [round(b - a, 4) for a, b in itertools.pairwise(times)]


def ray_run(
    steps: int,
    warmup: int,
    report_every: int,
    ckpt_every: int | None,
    ray_env: dict[str, str],
    mirror_head: bool = False,
    wakeups: bool = False,
) -> dict[str, Any]:
    """One Ray Train run on its own fresh local cluster (head with 0 CPUs for the controller, one
    worker node with 2 CPUs for the 2 workers), stopped afterwards so that no Ray process is
    left running during the DDP runs. CPU seconds of every Ray process over the measured
    steps come from /proc."""
    import contextlib

    import ray

    from rigs.local_cluster import LocalCluster
    from workloads.training import settings as S
    from workloads.training.job import run

    saved_env = {k: os.environ.get(k) for k in ray_env}
    os.environ.update(ray_env)  # the driver too (Train reads some settings where trainer.fit runs)
    with tempfile.TemporaryDirectory() as d, HeadCgroup() if mirror_head else contextlib.nullcontext() as cg:
        cluster = LocalCluster(
            worker_nodes=1,
            cpus_per_node=2,
            dashboard=False,
            env_extra=ray_env,
            head_cgroup=str(cg.path) if cg else None,
            worker_log_monitor=bool(cg),
        )
        out = os.path.join(d, "ray.json")
        s = S.for_local(
            {
                "model": MODEL,
                "steps": steps,
                "batch_size_per_worker": BATCH,
                "report_every_steps": report_every,
                "checkpoint_every_steps": ckpt_every or steps,
                "storage_shared": True,
                "sharding": "ddp",
                "placement_strategy": "PACK",
                "run_name": "bench",
            },
            storage_path=os.path.join(d, "ckpt"),
        )
        t_start = time.time()
        try:
            if cg:
                cg.join()
            cluster.start()
            if cg:
                cg.check(cluster)
            os.environ["RAY_ADDRESS"] = cluster.address
            ray.init(address=cluster.address, logging_level=logging.WARNING, log_to_driver=False)

            def pids() -> list[int]:
                return [os.getpid()] + [p for n in cluster.nodes for p in [n.proc.pid, *procfs.descendants(n.proc.pid)]]

            box: dict[str, Any] = {}  # the thread's ray.train.Result
            t = threading.Thread(
                target=lambda: box.setdefault("r", run(s, step_callback=StepTimer(out, warmup))), daemon=True
            )
            t.start()
            w = Window(out, pids, t.is_alive, wakeups)
            head_pids = set(procfs.descendants(cluster.nodes[0].proc.pid))
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
        key = (
            "driver (trainer.fit)"
            if pid == os.getpid()
            else f"{name} (worker node)"
            if node == "worker node" and name != "train workers"
            else name
        )
        by_name[key] = by_name.get(key, 0.0) + c
    n_steps = len(timing["times"]) - (warmup - timing["first_step"]) - 1
    return {
        "tokens_per_s": _tokens_per_s(timing, warmup),
        "timing": timing,
        "steps_measured": n_steps,
        # Time inside report() is not observable from a step callback: not measured.
        "cpu_s_by_process": by_name,
        "cpu_s_by_node": by_node,
        "report_s": float("nan"),
        "reports": 0,
        "foreign_cores": w.foreign_cores(),
        "wall_s": time.time() - t_start,
        "ranks_sched": w.ranks_sched(),
        "wakeups_per_s": w.wakeups_per_s(),
        "wakeups_per_s_by_thread": w.wakeups_by_thread(),
    }


def _model_config() -> dict[str, Any]:
    """The model both sides train: MODEL over the job's local defaults (workloads.training.settings)."""
    from workloads.training import settings as S

    model: dict[str, Any] = S.for_local({"model": MODEL, "sharding": "ddp"}, storage_path="/unused").model
    return model


def ddp_run(
    steps: int, warmup: int, report_every: int, ckpt_every: int | None, wakeups: bool = False
) -> dict[str, Any]:
    from rigs.local_cluster import free_port

    t_start = time.time()
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "ddp.json")
        os.makedirs(os.path.join(d, "ddp"))
        args = [2, free_port(), steps, warmup, report_every, ckpt_every, os.path.join(d, "ddp"), out, _model_config()]
        proc = subprocess.Popen(
            [sys.executable, __file__, "--ddp-child", json.dumps(args)], env={**os.environ, "PYTHONPATH": str(REPO)}
        )
        try:
            w = Window(
                out,
                lambda: [os.getpid(), proc.pid, *procfs.descendants(proc.pid)],
                lambda: proc.poll() is None,
                wakeups,
            )
        finally:
            rc = proc.wait()
        if rc:
            raise RuntimeError(f"DDP run failed: rc={rc}")
        timing = json.loads(Path(out).read_text())
    return {
        "tokens_per_s": _tokens_per_s(timing, warmup),
        "timing": timing,
        "foreign_cores": w.foreign_cores(),
        "wall_s": time.time() - t_start,
        "ranks_sched": w.ranks_sched(),
        "wakeups_per_s": w.wakeups_per_s(),
        "wakeups_per_s_by_thread": w.wakeups_by_thread(),
    }


def _stall_pct(t: dict[str, Any], ckpt_every: int | None) -> float | None:
    """Extra wall time of the steps right after a checkpoint, as % of the run (same run)."""
    if not ckpt_every:
        return None
    first, times = t["first_step"], t["times"]
    dts = {first + i: times[i] - times[i - 1] for i in range(1, len(times))}  # step -> its duration
    after_ckpt = {k for k in dts if (k - 1) % ckpt_every == 0}
    normal = sorted(v for k, v in dts.items() if k not in after_ckpt)
    median = normal[len(normal) // 2]
    extra = sum(max(0.0, dts[k] - median) for k in after_ckpt)
    pct: float = 100 * extra / sum(dts.values())
    return pct


def _env_pairs(pairs: list[str], flag: str = "--ray-env") -> dict[str, str]:
    out = {}
    for pair in pairs:
        k, sep, v = pair.partition("=")
        if not sep or not k:
            raise SystemExit(f"{flag} {pair!r}: expected NAME=VALUE, e.g. RAY_TRAIN_HEALTH_CHECK_INTERVAL_S=1")
        out[k] = v
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3, help="DDP/Ray pairs per config (medians reported)")
    p.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset of: " + ", ".join(CONFIGS))
    p.add_argument(
        "--ray-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="environment of every Ray process (and the driver), on top of "
        "workloads.training.settings.LOCAL_RAY_ENV, e.g. RAY_TRAIN_HEALTH_CHECK_INTERVAL_S=2",
    )
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="LABEL:NAME=VALUE[,NAME=VALUE]",
        help="A/B in one run: give two or more; every block then runs DDP once and Ray once "
        "per variant (its settings on top of the shipped ones and --ray-env; LABEL: "
        "alone is the shipped settings), and the variants are compared block by block",
    )
    p.add_argument(
        "--wakeups",
        action="store_true",
        help="also count every thread's wake-ups per second (voluntary context switches) over "
        "the window; reading every thread of a Ray run takes ~0.1 s of CPU at the "
        "window's start, which Ray's side pays more than DDP's: for diagnosis, not for ratios",
    )
    p.add_argument(
        "--mirror-head",
        action="store_true",
        help="run the head node, its processes and the driver at the lowest CPU weight "
        "(a cgroup), as if on other machines like the cluster's `system` nodes; "
        "a worker-node log monitor runs as on the cluster",
    )
    p.add_argument("--out", default=str(REPO / "out" / "bench" / "training_throughput.json"))
    p.add_argument("--ddp-child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.ddp_child:
        _ddp_main(args.ddp_child)
        return 0
    from manifests.training import RAY_ENV
    from workloads.training.settings import LOCAL_RAY_ENV

    # What the RayJob ships (manifest.RAY_ENV), then the local settings (the controller's poll:
    # see LOCAL_RAY_ENV), then --ray-env; --ray-env RAY_TRAIN_HEALTH_CHECK_INTERVAL_S=2 measures
    # with Ray's default poll, --ray-env RAY_TRAIN_ENABLE_PREEMPTION_WATCHER=1 with the watcher.
    ray_env = {**RAY_ENV, **LOCAL_RAY_ENV, **_env_pairs(args.ray_env)}
    variants = _variants(args.variant) or [("", {})]

    print(
        f"one at a time, interleaved (DDP, Ray, Ray, DDP, ...), {args.repeats} pair(s) per config, "
        f"{args.steps} steps, tokens/s from step {args.warmup} to the last; load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; Ray env {ray_env or 'defaults'}",
        flush=True,
    )
    if len(variants) > 1:
        print(
            "A/B: in every block one DDP run and one Ray run per variant, in a rotating order "
            "(DDP first, then last; the variants' order turns every two blocks), each variant's "
            "ratio against its block's DDP run: " + "; ".join(f"{v} = shipped + {e or 'nothing'}" for v, e in variants),
            flush=True,
        )
    perms = list(itertools.permutations(range(len(variants))))
    rows = []
    for name in args.configs.split(","):
        report_every, ckpt_every = CONFIGS[name]
        for r in range(args.repeats):
            vs = perms[(r // 2) % len(perms)]
            # DDP first, then last: cancels slow drifts (with one variant: DDP, Ray, then Ray, DDP)
            order: list[int | str] = ["ddp", *vs] if r % 2 == 0 else [*vs, "ddp"]
            m: dict[int | str, dict[str, Any]] = {}
            for side in order:
                m[side] = (
                    ddp_run(args.steps, args.warmup, report_every, ckpt_every, args.wakeups)
                    if isinstance(side, str)  # "ddp"; the Ray runs are variant indices
                    else ray_run(
                        args.steps,
                        args.warmup,
                        report_every,
                        ckpt_every,
                        {**ray_env, **variants[side][1]},
                        args.mirror_head,
                        args.wakeups,
                    )
                )
            for vi, (vname, _) in enumerate(variants):
                rows.append(
                    _row(
                        name,
                        r,
                        [("ray" if o == vi else o) for o in order if o in ("ddp", vi)],
                        m[vi],
                        m["ddp"],
                        ckpt_every,
                        args.warmup,
                        vname,
                        ["ddp" if isinstance(o, str) else variants[o][0] or "ray" for o in order],
                    )
                )
    _summary_and_out(args, rows, ray_env, variants)
    return 0


def _variants(specs: list[str]) -> Variants:
    """--variant NAME:NAME=VALUE,NAME=VALUE (or NAME: for the shipped settings alone)."""
    out: Variants = []
    for spec in specs:
        vname, sep, rest = spec.partition(":")
        if not sep or not vname:
            raise SystemExit(
                f"--variant {spec!r}: expected LABEL:NAME=VALUE[,NAME=VALUE...] or LABEL: "
                "(the shipped settings alone), e.g. nice0:RAY_worker_niceness=0"
            )
        if vname in (v for v, _ in out):
            raise SystemExit(f"--variant {spec!r}: label {vname!r} given twice")
        out.append((vname, _env_pairs([x for x in rest.split(",") if x], flag="--variant")))
    return out


def _row(
    name: str,
    r: int,
    order: list[int | str],
    ray_m: dict[str, Any],
    ddp_m: dict[str, Any],
    ckpt_every: int | None,
    warmup: int,
    variant: str,
    block_order: list[str],
) -> Row:
    n = ray_m["steps_measured"]
    cpu = ray_m["cpu_s_by_process"]
    others = {k: v for k, v in cpu.items() if k != "train workers"}
    row = {
        "config": name,
        "variant": variant,
        "repeat": r,
        "order": order,
        "block_order": block_order,
        "ddp_tokens_per_s": ddp_m["tokens_per_s"],
        "ray_tokens_per_s": ray_m["tokens_per_s"],
        "ratio": ray_m["tokens_per_s"] / ddp_m["tokens_per_s"],
        "ddp_rank0_cpu_ms_per_step": 1000 * ddp_m["timing"]["cpu_s"] / n,
        "ray_rank0_cpu_ms_per_step": 1000 * ray_m["timing"]["cpu_s"] / n,
        "ray_other_cpu_ms_per_step": {k: 1000 * v / n for k, v in sorted(others.items(), key=lambda kv: -kv[1])},
        "ray_other_cpu_ms_per_step_by_node": {k: 1000 * v / n for k, v in ray_m["cpu_s_by_node"].items()},
        "ray_report_ms_mean": 1000 * ray_m["report_s"] / max(1, ray_m["reports"]),
        "ray_reports": ray_m["reports"],
        "ray_report_s_total": ray_m["report_s"],
        "ddp_checkpoint_stall_pct": _stall_pct(ddp_m["timing"], ckpt_every),
        "ray_checkpoint_stall_pct": _stall_pct(ray_m["timing"], ckpt_every),
        "ddp_foreign_cores": ddp_m["foreign_cores"],
        "ray_foreign_cores": ray_m["foreign_cores"],
        "ddp_wall_s": ddp_m["wall_s"],
        "ray_wall_s": ray_m["wall_s"],
        # wake-ups per second of every thread but the ranks' training threads (--wakeups only)
        "ddp_wakeups_per_s": ddp_m["wakeups_per_s"],
        "ray_wakeups_per_s": ray_m["wakeups_per_s"],
        "ddp_wakeups_per_s_by_thread": ddp_m["wakeups_per_s_by_thread"],
        "ray_wakeups_per_s_by_thread": ray_m["wakeups_per_s_by_thread"],
        # the ranks' training threads: % of their wall time on a core, waiting for one, sleeping
        **{
            f"{side}_train_thread_{k}": v
            for side, m in (("ddp", ddp_m), ("ray", ray_m))
            for k, v in m["ranks_sched"].items()
        },
        "utc": time.strftime("%H:%M:%S", time.gmtime()),
        "load_average": os.getloadavg(),
        "ddp_step_s": _step_s(ddp_m["timing"], warmup),
        "ray_step_s": _step_s(ray_m["timing"], warmup),
    }
    top = ", ".join(f"{k} {v:.1f}" for k, v in list(row["ray_other_cpu_ms_per_step"].items())[:5])
    print(
        f"{_key(row):40s} DDP {row['ddp_tokens_per_s']:6.0f} tok/s  Ray {row['ray_tokens_per_s']:6.0f} tok/s  "
        f"ratio {row['ratio']:.3f}  | CPU ms/step rank 0: DDP {row['ddp_rank0_cpu_ms_per_step']:.1f} "
        f"Ray {row['ray_rank0_cpu_ms_per_step']:.1f}; Ray's other processes {sum(others.values()) * 1000 / n:.1f} "
        f"("
        + ", ".join(f"{k} {v:.1f}" for k, v in row["ray_other_cpu_ms_per_step_by_node"].items())
        + f"; {top}) | in report(): {row['ray_report_ms_mean']:.1f} ms x {row['ray_reports']}"
        f" | training threads, DDP / Ray: on a core "
        + _pair(row, "on_core_pct")
        + " %, waiting for a core "
        + _pair(row, "waiting_for_core_pct")
        + " %, sleeping "
        + _pair(row, "sleeping_pct")
        + " %, preemptions/s "
        + _pair(row, "preemptions_per_s")
        + (
            f" | wake-ups/s of the other threads DDP {sum(row['ddp_wakeups_per_s'].values()):.0f}, Ray "
            f"{sum(row['ray_wakeups_per_s'].values()):.0f} ("
            + ", ".join(f"{k} {v:.0f}" for k, v in list(row["ray_wakeups_per_s"].items())[:6])
            + ")"
            if row["ray_wakeups_per_s"]
            else ""
        )
        + f" | other load (cores) DDP {row['ddp_foreign_cores']:.2f} Ray {row['ray_foreign_cores']:.2f}"
        f" | {row['utc']} UTC, load {row['load_average'][0]:.2f}, {row['ddp_wall_s']:.0f} + {row['ray_wall_s']:.0f} s",
        flush=True,
    )
    return row


def _pair(row: Row, k: str, fmt: str = ".1f") -> str:
    return " / ".join(format(row.get(f"{side}_train_thread_{k}", float("nan")), fmt) for side in ("ddp", "ray"))


def _summary_and_out(args: argparse.Namespace, rows: list[Row], ray_env: dict[str, str], variants: Variants) -> None:
    summary = {}
    for name in dict.fromkeys(_key(r) for r in rows):
        rs = [r for r in rows if _key(r) == name]
        summary[name] = {
            "ratio": statistics.median(r["ratio"] for r in rs),
            "ratio_min": min(r["ratio"] for r in rs),
            "ratio_max": max(r["ratio"] for r in rs),
            "ratios": [r["ratio"] for r in rs],
            "ddp_tokens_per_s": statistics.median(r["ddp_tokens_per_s"] for r in rs),
            "ray_tokens_per_s": statistics.median(r["ray_tokens_per_s"] for r in rs),
        }
        stall = [r["ray_checkpoint_stall_pct"] for r in rs if r["ray_checkpoint_stall_pct"] is not None]
        if stall:
            summary[name]["ray_checkpoint_stall_pct"] = statistics.median(stall)
            summary[name]["ddp_checkpoint_stall_pct"] = statistics.median(r["ddp_checkpoint_stall_pct"] for r in rs)
    print(
        f"median Ray/DDP ratio per config (goal >= 0.97), [lowest, highest] of the {args.repeats} pairs"
        f"{', head mirrored off the ranks (--mirror-head)' if args.mirror_head else ', default topology'}: "
        + ", ".join(f"{k}: {v['ratio']:.3f} [{v['ratio_min']:.3f}, {v['ratio_max']:.3f}]" for k, v in summary.items())
    )
    for k, v in summary.items():
        if "ray_checkpoint_stall_pct" in v:
            print(
                f"step-time stall from checkpoints ({k}; extra time of the steps right after a checkpoint, "
                f"same run): Ray {v['ray_checkpoint_stall_pct']:.1f} %, DDP {v['ddp_checkpoint_stall_pct']:.1f} % (goal <= 5 %)"
            )
    if len(variants) > 1:
        # The variants against each other, block by block (the same DDP run cancels out).
        base = variants[0][0]
        for name in dict.fromkeys(r["config"] for r in rows):
            for vname, _ in variants[1:]:
                per_block = [
                    a["ray_tokens_per_s"] / b["ray_tokens_per_s"]
                    for a in rows
                    for b in rows
                    if a["config"] == b["config"] == name
                    and a["repeat"] == b["repeat"]
                    and a["variant"] == vname
                    and b["variant"] == base
                ]
                summary[f"{name} [{vname}] / [{base}]"] = {"ratio": statistics.median(per_block), "ratios": per_block}
                print(
                    f"{name}: Ray [{vname}] / Ray [{base}] tokens/s, same block: median "
                    f"{statistics.median(per_block):.3f}, per block " + ", ".join(f"{x:.3f}" for x in per_block),
                    flush=True,
                )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(
        json.dumps(
            {
                "rows": rows,
                "summary": summary,
                "steps": args.steps,
                "warmup": args.warmup,
                "ray_env": ray_env,
                "mirror_head": args.mirror_head,
                "variants": dict(variants),
                "model": MODEL,
                "batch_per_worker": BATCH,
            },
            indent=2,
        )
    )


def _key(row: Row) -> str:
    return f"{row['config']} [{row['variant']}]" if row["variant"] else row["config"]


if __name__ == "__main__":
    import signal

    # `timeout` sends SIGTERM: exit through the finally blocks, so the local cluster is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main())
