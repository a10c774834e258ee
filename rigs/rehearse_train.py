"""Local rehearsal of a node loss: ``make rehearse-train``.

Starts a Ray cluster on this machine (head + 2 worker nodes, each its own ``ray start`` on
127.0.0.1 with its own ports, memory and object store), submits the training entrypoint through
the Ray Jobs API at http://127.0.0.1:8265: 4 FSDP2 workers (2 per node) with sharded
asynchronous checkpoints. It SIGKILLs one worker node mid-run, on two paths (``PATHS``), each
on a cluster of its own:
- shrink: elastic down to 2 (``min_workers``), no replacement; the restart waits
  ``replacement_wait_s`` for the lost node's resources, then Ray Train restarts the group on the
  2 workers the surviving node holds, which load the latest checkpoint resharded from 4 ranks to
  2 and finish;
- same-size: a fixed-size run whose lost node's replacement joins at once (on the cluster add
  HyperPod's replacement time); the 4 workers resume at the same world size.
Before the cluster starts it pre-tokenizes a small local corpus (the standard library's sources as
JSON Lines) with a byte-level BPE tokenizer trained on the spot (``prepare_tokens``: the
pretokenize pipeline's local mode), and the job trains on that dataset (``training.dataset_path``)
with evaluation every ``--eval-every`` steps on its validation split; ``--data bytes`` keeps the
raw-text path. The summary names the validation loss before the kill and after the resume.
It stops the cluster and prints a summary per path, with the run's goodput and its wall time per
bucket (the job's own accounts, workloads/training/goodput.py, read from the run's goodput.json).
A loss-over-steps plot (PNG) marks the node loss and the resume; a second panel splits the wall
time, every attempt together, into the goodput buckets. ``--no-kill`` runs once without the node
loss.

One module because it is one rehearsal: the cluster, the job's log, the recovery's phases and the
summary are read top to bottom as one run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from manifests.training import RAY_ENV
from rigs.local_cluster import REPO_ROOT, LocalCluster

STEP_RE = re.compile(r"TRAIN step=(\d+) loss=([0-9.]+) t=([0-9.]+)")
RESUME_RE = re.compile(r"TRAIN resume step=(\d+) from=(\S+) world=(\d+) t=([0-9.]+)")
START_RE = re.compile(r"TRAIN start step=0 \(no checkpoint\) world=(\d+)")
EVAL_RE = re.compile(r"TRAIN eval val_step=(\d+) val_loss=([0-9.]+)")
WORKER_RE = re.compile(r"TRAIN worker rank=(\d+) node=(\w+) proc_start=([0-9.]+) t=([0-9.]+)(?: cpu=([0-9.]+))?")
# Node-loss detection in the GCS: 3 missed health checks 1 s apart (Ray: 5 x 3 s). The
# controller's poll (RAY_TRAIN_HEALTH_CHECK_INTERVAL_S) stays at its 2 s default, as in the RayJob.
FAST_DETECTION = {
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
    "RAY_health_check_timeout_ms": "1000",
}


# The rehearsal's tokenizer and corpus: small enough to train and tokenize in seconds.
REHEARSAL_VOCAB = 512
REHEARSAL_DOCS = 400


def prepare_tokens(out_dir: Path, *, vocab_size: int = REHEARSAL_VOCAB, docs: int = REHEARSAL_DOCS) -> dict[str, Any]:
    """A token dataset under ``out_dir``: ``docs`` standard-library modules as JSON Lines, a
    byte-level BPE tokenizer of ``vocab_size`` ids trained on them, and the pretokenize
    pipeline (local mode) over them; returns the job's ``training.*`` overrides that read it."""
    from rigs.bpe import stdlib_texts, train_bpe
    from workloads.pretokenize.pipeline import PretokenizeConfig
    from workloads.pretokenize.pipeline import run as pretokenize

    raw, dataset, tok_path = out_dir / "raw", out_dir / "dataset", out_dir / "tokenizer.json"
    for d in (raw, dataset):
        shutil.rmtree(d, ignore_errors=True)
    raw.mkdir(parents=True)
    texts = stdlib_texts(docs)
    (raw / "corpus.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    train_bpe(tok_path, texts=texts, vocab_size=vocab_size)
    manifest = pretokenize(
        PretokenizeConfig(
            input=str(raw), output=str(dataset), tokenizer=str(tok_path), validation_fraction=0.05, shard_tokens=1 << 20
        ),
        local=True,
        log=lambda _: None,
    )
    return {
        "dataset_path": str(dataset),
        "tokenizer": str(tok_path),
        "model.vocab_size": vocab_size,
        "tokens": {s: manifest.splits[s].tokens for s in manifest.splits},
    }


def rehearse(
    *,
    steps: int,
    checkpoint_every: int,
    kill_at_step: int,
    out_dir: Path,
    num_workers: int = 4,
    min_workers: int | None = 2,
    replace_node: bool = False,
    replacement_wait_s: int | None = None,
    detection: str = "fast",
    gcs_port: int | None = 6379,
    dashboard_port: int | None = 8265,
    quiet: bool = False,
    ray_env: dict[str, str] | None = None,
    report_every: int | None = None,
    data: str = "tokens",
    eval_every: int = 50,
) -> dict[str, Any]:
    from ray.job_submission import JobStatus, JobSubmissionClient

    def say(*a: object) -> None:
        if not quiet:
            print(*a, flush=True)

    out_dir = out_dir.resolve()  # the job runs with another working directory
    out_dir.mkdir(parents=True, exist_ok=True)
    # Kept under out_dir after the run: `make rehearse-serve` serves the newest checkpoint found
    # under out/. Emptied first, so a rerun starts fresh instead of resuming the last rehearsal.
    storage = str(out_dir / "checkpoints")
    shutil.rmtree(storage, ignore_errors=True)
    os.makedirs(storage)
    cluster = LocalCluster(
        worker_nodes=2,
        cpus_per_node=2,
        memory_per_node_mib=3072,
        object_store_per_node_mib=512,
        gcs_port=gcs_port,
        dashboard_port=dashboard_port,
        # The RayJob's Ray settings (no PreemptionWatcher actor per worker group, ...), so that
        # a restart here starts the processes a restart on the cluster starts.
        # RAY_DEDUP_LOGS=0: the ranks' "TRAIN worker" lines differ only in numbers, and the
        # driver's log deduplication would fold them into one.
        env_extra={
            **RAY_ENV,
            "RAY_DEDUP_LOGS": "0",
            **(FAST_DETECTION if detection == "fast" else {}),
            **(ray_env or {}),
        },
    )
    steps_seen: list[tuple[int, float, float, int]] = []  # (step, loss, t, attempt)
    resumes: list[tuple[int, float, int]] = []  # (step, t, world size)
    first_world: list[int] = []
    setup: dict[str, str] = {}  # set-up phases of the last resume (train_func: imports, model, checkpoint, ...)
    workers: list[dict[str, Any]] = []  # one per worker start: rank, node, proc_start, t (loop entered), attempt
    kill_t: float | None = None
    dead_t: list[tuple[float, str]] = []  # when the GCS declared the killed node dead, and its node id
    evals: list[tuple[int, float, float, int]] = []  # (step, validation loss, t seen, attempt)
    overrides = ""
    if data == "tokens":
        t_tok = time.time()
        tokens = prepare_tokens(out_dir)
        say(
            f"==> pretokenized {REHEARSAL_DOCS} stdlib modules with a {REHEARSAL_VOCAB}-id BPE trained here: "
            f"{tokens['tokens']} tokens in {time.time() - t_tok:.1f} s ({tokens['dataset_path']})"
        )
        overrides = (
            f" --set dataset_path={tokens['dataset_path']} --set tokenizer={tokens['tokenizer']}"
            f" --set model.vocab_size={tokens['model.vocab_size']}"
            f" --set eval_every_steps={eval_every} --set eval_batches=2"
        )
    elif eval_every:
        overrides = f" --set eval_every_steps={eval_every} --set eval_batches=2"
    t0 = time.time()
    try:
        say(
            f"==> starting a local Ray cluster: head + 2 worker nodes (temp dir under /tmp), "
            f"GCS 127.0.0.1:{cluster.gcs_port or 'free'}, dashboard {cluster.dashboard_port or 'free'}"
        )
        cluster.start()
        say(f"    up in {time.time() - t0:.0f} s; dashboard {cluster.dashboard_url}")
        client = JobSubmissionClient(cluster.dashboard_url)
        entry = (
            f"{sys.executable} -m workloads.training --local --storage {storage} "
            f"--set steps={steps} --set checkpoint_every_steps={checkpoint_every} "
            f"--set storage_shared=true --set log_every_step=true --set run_name=rehearsal "
            f"--set num_workers={num_workers}"
            + (f" --set min_workers={min_workers}" if min_workers else "")
            + (f" --set replacement_wait_s={replacement_wait_s}" if replacement_wait_s else "")
            + (f" --set report_every_steps={report_every}" if report_every else "")
            + overrides
            # The run ends with its Hugging Face export (what the LLM service and rehearse-serve read).
            + f" --set export_at_end=true --set export_path={out_dir.resolve() / 'export'}"
        )
        # The job's PYTHONPATH replaces the node's: keep the offline hook on it (loopback only),
        # or the job's driver resolves 127.0.0.1 to the host's interface and cannot reach the GCS.
        job_id = client.submit_job(
            entrypoint=entry, runtime_env={"env_vars": {"PYTHONPATH": cluster.env()["PYTHONPATH"]}}
        )
        say(f"==> submitted {job_id}: {entry}")
        seen, attempt, status, unique = 0, 0, None, set()
        deadline = time.monotonic() + 1500
        while time.monotonic() < deadline:
            status = client.get_job_status(job_id)
            logs = client.get_job_logs(job_id)
            lines = logs.splitlines()
            for line in lines[seen:]:
                # Worker output can reach the job log more than once; lines carry timestamps.
                key = line.split(")", 1)[-1].strip()
                if key in unique:
                    continue
                unique.add(key)
                if m := WORKER_RE.search(line):
                    workers.append(
                        {
                            "rank": int(m.group(1)),
                            "node": m.group(2),
                            "proc_start": float(m.group(3)),
                            "t": float(m.group(4)),
                            "cpu": float(m.group(5)) if m.group(5) else None,
                            "attempt": attempt + (1 if kill_t else 0),
                        }
                    )
                elif m := RESUME_RE.search(line):
                    attempt += 1
                    resumes.append((int(m.group(1)), float(m.group(4)), int(m.group(3))))
                    setup = (
                        dict(re.findall(r"(\w+)=([0-9.]+)s", line.split("setup:", 1)[-1])) if "setup:" in line else {}
                    )
                    say(f"    resumed on {m.group(3)} workers from the checkpoint at step {m.group(1)} ({m.group(2)})")
                elif m := EVAL_RE.search(line):
                    evals.append((int(m.group(1)), float(m.group(2)), time.time(), attempt))
                    say(f"    eval at step {m.group(1)}: validation loss {float(m.group(2)):.4f}")
                elif m := START_RE.search(line):
                    first_world.append(int(m.group(1)))
                elif m := STEP_RE.search(line):
                    step, loss, t = int(m.group(1)), float(m.group(2)), float(m.group(3))
                    steps_seen.append((step, loss, t, attempt))
                    if step % 25 == 0:
                        say(f"    step {step:4d}/{steps}  loss {loss:.3f}")
                    if kill_t is None and step >= kill_at_step:
                        cluster.kill_node(2)
                        kill_t = time.time()
                        _watch_node_death(cluster, dead_t)
                        say(f"==> killed worker node 2 (SIGKILL to all its processes) after step {step}")
                        if replace_node:  # the same-size path: the replacement joins at once
                            cluster.add_worker(wait=False)
                            say("==> a replacement worker node is joining")
                elif "TRAIN" in line or "Error" in line:
                    say("    " + line.strip()[:200])
            seen = len(lines)
            if status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
                break
            time.sleep(0.5)
        (out_dir / "job.log").write_text(client.get_job_logs(job_id))
        _keep_train_logs(cluster, out_dir / "ray-train-logs")
    finally:
        say("==> stopping the cluster")
        cluster.stop()

    summary = _summarize(steps, steps_seen, resumes, kill_t, str(status), checkpoint_every, detection)
    summary["workers_first"] = first_world[0] if first_world else None
    summary["workers_after_resume"] = resumes[-1][2] if resumes else None
    summary["phases"] = _phases(kill_t, dead_t, workers, resumes, summary, out_dir / "ray-train-logs")
    summary["phases"].update({f"setup_{k}_s": float(v) for k, v in setup.items()})
    summary["killed_node"] = dead_t[0][1] if dead_t else None
    summary["data"] = data
    before = [e for e in evals if kill_t is None or e[2] <= kill_t]
    after = [e for e in evals if kill_t is not None and e[2] > kill_t]
    summary["val_loss_before_kill"] = list(before[-1][:2]) if before else None
    summary["val_loss_after_resume"] = list(after[-1][:2]) if after else None
    # The same step evaluated before the kill and again after the resume (redone steps): equal
    # at the same world size (bitwise on CPU).
    again = {e[0]: e[1] for e in after}
    summary["val_loss_same_step"] = [(st, v, again[st]) for st, v, _, _ in before if st in again]
    summary["goodput"] = _goodput(Path(storage) / "rehearsal")
    summary["export"] = _export(out_dir / "export", say)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    summary["plot"] = str(_plot(steps_seen, resumes, kill_t, out_dir / "loss.png", summary["goodput"]))
    return summary


def _watch_node_death(cluster: LocalCluster, found: list[tuple[float, str]]) -> None:
    """Record (in ``found``) when the GCS stops counting the killed node as alive, and its id."""
    import threading

    from ray._raylet import GcsClient  # type: ignore[attr-defined]  # compiled; ray's _raylet.pyi omits it

    def watch() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                infos = GcsClient(address=cluster.address).get_all_node_info(timeout=5)
            except Exception:
                infos = {}
            dead = [nid for nid, info in infos.items() if info.state != 0]
            if dead:
                found.append((time.time(), (dead[0].hex() if hasattr(dead[0], "hex") else str(dead[0]))[:12]))
                return
            time.sleep(0.1)

    threading.Thread(target=watch, daemon=True).start()


def _keep_train_logs(cluster: LocalCluster, dest: Path) -> None:
    """Copy Ray Train's controller and worker logs out of the cluster's temp dir before stop."""
    shutil.rmtree(dest, ignore_errors=True)
    assert cluster.temp_dir is not None, "start() sets temp_dir"
    for d in Path(cluster.temp_dir).glob("session_*/logs/train"):
        shutil.copytree(d, dest, dirs_exist_ok=True)


# Ray Train 2.60 controller log messages that mark the recovery's steps (worker_group.py,
# _start_impl): the failure found by the controller's poll; the old group shut down; the new
# group's placement group ready; its worker processes started, Ray and the actor class imported;
# the train context set on them, which imports torch (unpickling the TorchConfig); the
# after_worker_group_start callbacks, the torch process group first (BackendSetupCallback); the
# training function launched.
CONTROLLER_EVENTS = (
    ("controller_decided_retry", "[FailurePolicy] RETRY"),
    ("old_group_shut_down", "Worker group shutdown successful"),
    ("placement_group_ready", "Placement group ready"),
    ("worker_actors_created", "worker actors created"),
    ("train_context_initialized", "Train context initialized"),
    ("process_group_initialized", "after_worker_group_start callbacks completed"),
    ("worker_group_started", "Started training worker group"),
)


def _controller_events(log_dir: Path, after: float) -> dict[str, float]:
    """Times (epoch s) of the first of each CONTROLLER_EVENTS after ``after``, from Ray Train's
    JSON controller log."""
    events: dict[str, float] = {}
    for f in sorted(log_dir.glob("ray-train-sys-controller*.log")):
        for line in f.read_text(errors="replace").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            t = rec.get("timestamp_ns", 0) / 1e9 or rec.get("asctime_epoch", 0)
            msg = rec.get("message", "")
            if t <= after:
                continue
            for key, needle in CONTROLLER_EVENTS:
                if key not in events and needle in msg:
                    events[key] = t
    return events


def _phases(
    kill_t: float | None,
    dead_t: list[tuple[float, str]],
    workers: list[dict[str, Any]],
    resumes: list[tuple[int, float, int]],
    summary: dict[str, Any],
    log_dir: Path,
) -> dict[str, Any]:
    """Seconds from the kill to each event of the recovery, and the length of each phase."""
    if kill_t is None or not resumes:
        return {}
    new = [w for w in workers if w["proc_start"] > kill_t]
    r0 = next((w for w in new if w["rank"] == 0), None)
    out: dict[str, Any] = {"gcs_declared_node_dead": round(dead_t[0][0] - kill_t, 2) if dead_t else None}
    out.update({k: round(v - kill_t, 2) for k, v in _controller_events(log_dir, kill_t).items()})
    if r0:
        out["new_workers_started"] = round(min(w["proc_start"] for w in new) - kill_t, 2)
        out["rank0_process_started"] = round(r0["proc_start"] - kill_t, 2)
        out["rank0_loop_entered"] = round(r0["t"] - kill_t, 2)
        out["worker_boot_s (process start to loop entry)"] = round(r0["t"] - r0["proc_start"], 2)
        if all(w["cpu"] is not None for w in new):
            # CPU seconds each new worker process used to get there: far less sensitive to other load.
            out["worker_boot_cpu_s (each new worker, process start to loop entry)"] = sorted(w["cpu"] for w in new)
    out["checkpoint_loaded"] = round(resumes[-1][1] - kill_t, 2)
    if r0:
        out["setup_s (loop entry to resumed state)"] = round(resumes[-1][1] - r0["t"], 2)
    if summary.get("recovery_s") is not None:
        out["first_step_after_resume"] = summary["recovery_s"]
        out["first_step_s"] = round(summary["recovery_s"] - (resumes[-1][1] - kill_t), 2)
    out["replacement_nodes"] = sorted({w["node"] for w in new})
    out["first_attempt_nodes"] = sorted({w["node"] for w in workers if w["proc_start"] <= kill_t})
    return out


def _summarize(
    steps: int,
    seen: list[tuple[int, float, float, int]],
    resumes: list[tuple[int, float, int]],
    kill_t: float | None,
    status: str,
    every: int,
    detection: str,
) -> dict[str, Any]:
    before = [s for s in seen if kill_t is not None and s[2] <= kill_t]
    last_before = max((s[0] for s in before), default=0)
    resume_step = resumes[-1][0] if resumes else None
    after = [
        s for s in seen if kill_t is not None and s[2] > kill_t and resume_step is not None and s[3] == len(resumes)
    ]
    first_after = min(after, key=lambda s: s[2]) if after else None
    return {
        "status": status,
        "detection": detection,
        "steps_total": steps,
        "last_step": max((s[0] for s in seen), default=0),
        "checkpoint_every_steps": every,
        "killed_after_step": last_before,
        "resume_step": resume_step,
        "steps_redone": (last_before - resume_step) if resume_step is not None else None,
        "recovery_s": round(first_after[2] - kill_t, 2) if first_after and kill_t is not None else None,
        "final_loss": seen[-1][1] if seen else None,
        "first_loss": seen[0][1] if seen else None,
    }


def _export(folder: Path, say: Any) -> str | None:
    """The run's export (training.export_at_end), checked against its manifest; None: none written."""
    from workloads.common.hf_llama import verify_export

    if not (folder / "manifest.json").exists():
        say(f"==> no export at {folder}")
        return None
    files = verify_export(str(folder))
    say(f"==> export {folder}: {len(files)} files, verified against its manifest (make rehearse-serve EXPORT={folder})")
    return str(folder)


def _goodput(run_dir: Path) -> dict[str, Any] | None:
    """The job's goodput accounts of the run (its ledger file), or None when it wrote none."""
    from workloads.training.goodput import read_ledger

    record = read_ledger(str(run_dir))
    if record is None:
        return None
    seconds = {b: round(v, 2) for b, v in record["seconds"].items()}
    return {
        "goodput": round(record["goodput"], 4),
        "wall_s": round(sum(record["seconds"].values()), 2),
        "attempts": record["attempts"],
        "seconds": seconds,
    }


def _plot_goodput(ax: Any, goodput: dict[str, Any]) -> None:
    """One horizontal bar: the run's wall time split into the goodput buckets (both attempts)."""
    from workloads.training.goodput import BUCKETS

    colors = dict(zip(BUCKETS, ("#2ca02c", "#d62728", "#1f77b4", "#ff7f0e", "#9467bd", "#7f7f7f"), strict=True))
    left, wall = 0.0, goodput["wall_s"] or 1.0
    for b in BUCKETS:
        v = goodput["seconds"][b]
        ax.barh([0], [v], left=left, color=colors[b], label=f"{b} {v:.1f} s ({v / wall:.0%})")
        left += v
    ax.set_yticks([])
    ax.set_xlabel("wall time from submission to the last step, s")
    lost = ": steps lost to the failure are 'redone', the wait for workers 'waiting'" if goodput["attempts"] > 1 else ""
    ax.set_title(
        f"goodput {goodput['goodput']:.1%} over {goodput['wall_s']:.0f} s, {goodput['attempts']} attempt(s){lost}",
        fontsize=9,
    )
    ax.legend(ncol=3, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.45))


def _plot(
    seen: list[tuple[int, float, float, int]],
    resumes: list[tuple[int, float, int]],
    kill_t: float | None,
    path: Path,
    goodput: dict[str, Any] | None = None,
) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if goodput is None:
        fig, ax = plt.subplots(figsize=(8, 4.5))
    else:
        fig, (ax, gax) = plt.subplots(2, 1, figsize=(8, 6.5), gridspec_kw={"height_ratios": [3, 1]})
        _plot_goodput(gax, goodput)
    attempts = sorted({s[3] for s in seen})
    for a in attempts:
        pts = [s for s in seen if s[3] == a]
        ax.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            lw=1 if a == 0 else 1.5,
            ls="-" if a == 0 else "--",
            label="first attempt"
            if a == 0
            else f"after resume {a} ({resumes[a - 1][2]} workers)"
            if a <= len(resumes)
            else f"attempt {a + 1}",
        )
    if kill_t is not None:
        before = [s for s in seen if s[2] <= kill_t]
        if before:
            ax.axvline(before[-1][0], color="red", ls="--", label=f"node killed (step {before[-1][0]})")
    for step, _, world in resumes:
        ax.axvline(step, color="green", ls=":", label=f"resumed on {world} workers from step {step}")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (rank 0)")
    ax.set_title(
        "Ray Train rehearsal: FSDP2, a worker-node loss, resume on fewer workers"
        if kill_t is not None
        else "Ray Train rehearsal: FSDP2, no failure"
    )
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# The two recoveries from a lost node: the same size (a fixed-size run, the lost node's
# replacement joining at once; on the cluster add HyperPod's replacement time) and the shrink (an
# elastic run, no replacement: it waits replacement_wait_s, then continues on the survivors).
PATHS = {
    "shrink": {"min_workers": 2, "replace_node": False},
    "same-size": {"min_workers": None, "replace_node": True},
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rigs.rehearse_train")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--checkpoint-every", type=int, default=50)
    p.add_argument("--report-every", type=int, help="training.report_every_steps (default: the job's)")
    p.add_argument("--kill-at-step", type=int, default=130)
    p.add_argument("--no-kill", action="store_true", help="no node loss: the goodput of an undisturbed run")
    p.add_argument(
        "--detection",
        choices=["fast", "default"],
        default="fast",
        help="GCS node-loss detection: 1 s x 3 (fast) or Ray's defaults",
    )
    p.add_argument("--path", choices=["both", *PATHS], default="both", help="which recovery to rehearse")
    p.add_argument(
        "--replacement-wait-s",
        type=int,
        default=10,
        help="training.replacement_wait_s of the shrink path (no replacement comes on this machine)",
    )
    p.add_argument(
        "--data",
        choices=["tokens", "bytes"],
        default="tokens",
        help="tokens: pretokenize a small corpus with a tokenizer trained here first; bytes: the raw-text path",
    )
    p.add_argument("--eval-every", type=int, default=50, help="training.eval_every_steps (0: off)")
    p.add_argument("--out", default=str(REPO_ROOT / "out" / "rehearse-train"))
    args = p.parse_args(argv)
    if args.no_kill:
        s = rehearse(
            steps=args.steps,
            checkpoint_every=args.checkpoint_every,
            kill_at_step=args.steps + 1,
            out_dir=Path(args.out) / "no-kill",
            report_every=args.report_every,
            detection=args.detection,
            replacement_wait_s=None,
            min_workers=None,
            replace_node=False,
            data=args.data,
            eval_every=args.eval_every,
        )
        return 0 if _report("no-kill", s, None) else 1
    failed = 0
    for path in PATHS if args.path == "both" else [args.path]:
        s = rehearse(
            steps=args.steps,
            checkpoint_every=args.checkpoint_every,
            kill_at_step=args.kill_at_step,
            out_dir=Path(args.out) / path,
            detection=args.detection,
            replacement_wait_s=args.replacement_wait_s if path == "shrink" else None,
            report_every=args.report_every,
            data=args.data,
            eval_every=args.eval_every,
            **PATHS[path],  # type: ignore[arg-type]
        )
        failed += not _report(path, s, args.replacement_wait_s if path == "shrink" else None)
    return 1 if failed else 0


def _report(path: str, s: dict[str, Any], wait_s: int | None) -> bool:
    print(f"\n==> rehearsal summary: {path} path" + (f" (replacement_wait_s {wait_s})" if wait_s else ""))
    for k in (
        "status",
        "steps_total",
        "last_step",
        "workers_first",
        "killed_after_step",
        "resume_step",
        "workers_after_resume",
        "steps_redone",
        "recovery_s",
        "first_loss",
        "final_loss",
        "data",
        "val_loss_before_kill",
        "val_loss_after_resume",
        "val_loss_same_step",
        "export",
        "plot",
    ):
        print(f"    {k:18s} {s[k]}")
    g = s["goodput"]
    if g is not None:
        print(f"    {'goodput':18s} {g['goodput']:.1%} of {g['wall_s']:.1f} s wall ({g['attempts']} attempt(s))")
        for bucket, v in g["seconds"].items():
            print(f"      {bucket:16s} {v:8.2f} s  {v / (g['wall_s'] or 1):6.1%}")
    print("    phases (s after the kill; *_s: phase lengths)")
    for k, v in s["phases"].items():
        print(f"      {k:55s} {v}")
    # A finished run ends with its export (training.export_at_end), verified against its manifest.
    finished = s["status"] == "SUCCEEDED" and s["last_step"] == s["steps_total"] and g is not None and s["export"]
    if path == "no-kill":
        ok = finished and s["resume_step"] is None
        print("    result            " + ("OK: finished without a failure" if ok else "FAILED"))
        return ok
    same = path == "same-size"
    resized = (s["workers_after_resume"] or 0) < (s["workers_first"] or 0)
    ok = finished and s["resume_step"] is not None and (resized != same)
    done = "resumed on the same workers" if same else "resumed on fewer workers"
    print(f"    result            {f'OK: {done} from the latest checkpoint and finished' if ok else 'FAILED'}")
    return ok


if __name__ == "__main__":
    import signal

    # `timeout` and CI send SIGTERM: exit through the finally blocks, so the cluster is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main())
