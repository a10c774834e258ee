"""The train loop's reports: the loss window, metrics to Ray Train and their pacing, the progress
lines the rehearsals parse, and the goodput accounts (workloads/training/goodput.py).

Its settings slice (``Reporter.from_settings``): ``run_name``, ``steps``, ``report_every_steps``,
``log_every_step``.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from ray.train import Checkpoint

    from config.job_settings import JobSettings
    from workloads.training.checkpointer import Resumed
    from workloads.training.goodput import Tracker

log = logging.getLogger("workloads.training")

# What drives recovery after a node loss (measured in bench/training_recovery.py, see
# bench/README.md): Ray Train's controller polls the workers every
# RAY_TRAIN_HEALTH_CHECK_INTERVAL_S (2 s; a killed worker fails its next poll), then new worker
# processes start and restore the state. The same poll also paces report(): see ReportPacing.


class ReportPacing:
    """Notices, once, when ``ray.train.report()`` sets the pace of training.

    Ray Train's controller takes at most one report per worker per poll
    (RAY_TRAIN_HEALTH_CHECK_INTERVAL_S, 2 s by default), and each worker's report queue holds
    one: report() blocks until the previous report has been taken. When reports come more
    often than the polls, every report waits for the next poll and training runs at the poll's
    pace (measured here: 10 steps in ~1.5 s with the 2 s poll, 0.24 s in every report(), 0.78
    of plain DDP's throughput; bench/README.md, "Training"). On the cluster reports come every
    ``report_every_steps`` GPU steps, seconds apart; this says so when that does not hold.
    """

    def __init__(self, report_every_steps: int, *, warn_fraction: float = 0.05, min_reports: int = 5):
        self.report_every_steps = report_every_steps
        self.warn_fraction = warn_fraction
        self.min_reports = min_reports
        self.blocked_s = 0.0
        self.reports = 0
        self.warned = False

    def add(self, blocked_s: float, loop_s: float, poll_s: str) -> str | None:
        """Record one report() that blocked ``blocked_s`` after ``loop_s`` seconds of the loop;
        returns the warning (once) when reports took more than ``warn_fraction`` of the loop."""
        self.blocked_s += blocked_s
        self.reports += 1
        if self.warned or self.reports < self.min_reports or self.blocked_s <= self.warn_fraction * loop_s:
            return None
        self.warned = True
        apart = loop_s / self.reports
        return (
            f"ray.train.report() blocked {self.blocked_s:.1f} s of {loop_s:.1f} s of training "
            f"({100 * self.blocked_s / loop_s:.0f} %, {self.reports} reports): reports every "
            f"{self.report_every_steps} steps come {apart:.1f} s apart, faster than Ray Train's "
            f"controller takes them (one per poll, RAY_TRAIN_HEALTH_CHECK_INTERVAL_S={poll_s}). "
            f"Raise training.report_every_steps, or set RAY_TRAIN_HEALTH_CHECK_INTERVAL_S below "
            f"{apart:.1f} s."
        )


def print_worker_line(rank: int) -> None:
    """When this worker process started and when the loop was entered (Ray worker start-up, the
    torch import, the process group and the loop's imports happen in between), the CPU seconds
    the process used in between, and on which node (rehearsals parse it)."""
    import ray

    from workloads.common.procfs import cpu_seconds, process_start_time

    print(
        f"TRAIN worker rank={rank} node={ray.get_runtime_context().get_node_id()[:12]} "
        f"proc_start={process_start_time():.3f} t={time.time():.3f} cpu={cpu_seconds('self'):.2f}",
        flush=True,
    )


class Reporter:
    """One rank's side of the reports: every rank reduces the loss and reports; rank 0 prints
    and keeps the goodput accounts."""

    def __init__(
        self,
        *,
        rank: int,
        world: int,
        run_name: str,
        steps: int,
        report_every_steps: int,
        log_every_step: bool,
        tokens_per_step: int,
        device: torch.device,
        accounts: Tracker,
        gpus: int = 0,
        peak_tflops_per_gpu: float | None = None,
        model_flops_per_token: float | None = None,
    ):
        self.rank, self.world, self.run_name, self.steps = rank, world, run_name, steps
        self.report_every_steps, self.log_every_step = report_every_steps, log_every_step
        self.tokens_per_step, self.device = tokens_per_step, device
        # Where the run's wall time goes (rank 0 keeps the accounts): workloads/training/goodput.py.
        self.accounts = accounts
        # MFU: tokens/s per GPU x training FLOPs per token over one GPU's dense bf16 peak (the
        # plan's figures, JobSettings); none on CPU workers or a chip without a peak.
        self.gpus, self.peak_tflops_per_gpu, self.model_flops_per_token = (
            gpus,
            peak_tflops_per_gpu,
            model_flops_per_token,
        )
        self.pacing = ReportPacing(report_every_steps)
        self.poll_s = os.environ.get("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "2 (Ray's default)")
        self.window_loss, self.window_n = 0.0, 0
        self.window_t0 = self.loop_t0 = time.perf_counter()
        # Ray gauges, made on rank 0 at the first report: the quality ones (set_gauges) and the
        # throughput ones (publish_throughput).
        self._gauges: dict[str, Any] | None = None
        self._throughput_gauges: dict[str, Any] | None = None

    @classmethod
    def from_settings(
        cls,
        s: JobSettings,
        rank: int,
        world: int,
        tokens_per_step: int,
        device: torch.device,
        run_dir: str,
        submitted: float | None,
        resumed: Resumed,
    ) -> Reporter:
        """The reports of an attempt that starts at ``resumed`` (the run submitted at ``submitted``)."""
        from workloads.common.procfs import process_start_time
        from workloads.training import goodput

        accounts = goodput.Tracker.begin(
            enabled=rank == 0,
            run_name=s.run_name,
            run_dir=run_dir,
            submitted=submitted,
            process_start=process_start_time(),
            restored_step=resumed.step,
            checkpoint_meta=resumed.meta,
        )
        return cls(
            rank=rank,
            world=world,
            run_name=s.run_name,
            steps=s.steps,
            report_every_steps=s.report_every_steps,
            log_every_step=s.log_every_step,
            tokens_per_step=tokens_per_step,
            device=device,
            accounts=accounts,
            gpus=world * s.gpus_per_worker,
            peak_tflops_per_gpu=s.peak_tflops_per_gpu,
            model_flops_per_token=s.model_flops_per_token,
        )

    def announce(self, resumed: Resumed, marks: list[tuple[str, float]]) -> None:
        """The attempt's start (rank 0): from which checkpoint, and its set-up phases (``marks``:
        each phase's name and end). The loop's clocks start here."""
        phases = " ".join(f"{name}={t - t0:.2f}s" for (_, t0), (name, t) in itertools.pairwise(marks))
        if self.rank == 0:
            if resumed.path is not None:
                print(
                    f"TRAIN resume step={resumed.step} from={resumed.path} world={self.world} t={time.time():.3f} "
                    f"setup: {phases}",
                    flush=True,
                )
            else:
                print(
                    f"TRAIN start step=0 (no checkpoint) world={self.world} t={time.time():.3f} setup: {phases}",
                    flush=True,
                )
        self.window_t0 = self.loop_t0 = time.perf_counter()

    def step_done(self, done: int, loss: float) -> None:
        self.accounts.step_done(done)
        self.window_loss += loss
        self.window_n += 1
        if self.log_every_step and self.rank == 0:
            print(f"TRAIN step={done} loss={loss:.4f} t={time.time():.3f}", flush=True)

    def evaluated(self, evaluation: dict[str, float]) -> None:
        """An evaluation's result, in the job's log (rank 0; rehearsals parse it)."""
        if self.rank == 0:
            values = " ".join(f"{k}={v:.6f}" if isinstance(v, float) else f"{k}={v}" for k, v in evaluation.items())
            print(f"TRAIN eval {values} t={time.time():.3f}", flush=True)

    def set_gauges(self, metrics: dict[str, Any]) -> None:
        """The report's loss, gradient norm and latest evaluation as Ray gauges (rank 0; names in
        config/observability.py ``TRAIN_QUALITY_GAUGES``)."""
        if self.rank != 0:
            return
        from config.observability import TRAIN_GOODPUT_RUN_LABEL, TRAIN_QUALITY_GAUGES

        if self._gauges is None:
            from ray.util.metrics import Gauge

            self._gauges = {
                key: Gauge(
                    name,
                    description=f"The training job's {key} at its latest report.",
                    tag_keys=(TRAIN_GOODPUT_RUN_LABEL,),
                )
                for key, name in TRAIN_QUALITY_GAUGES.items()
            }
        for key, gauge in self._gauges.items():
            if key in metrics:
                gauge.set(float(metrics[key]), tags={TRAIN_GOODPUT_RUN_LABEL: self.run_name})

    def due(self, done: int) -> bool:
        return done % self.report_every_steps == 0

    def metrics(self, done: int, lr: float | torch.Tensor, resumed_from: int) -> dict[str, Any]:
        """The window's metrics (collective: the loss is averaged over the ranks); a new window
        starts."""
        import torch
        import torch.distributed as dist

        mean = torch.tensor([self.window_loss / self.window_n], device=self.device)
        dist.all_reduce(mean)
        elapsed = time.perf_counter() - self.window_t0
        tokens_per_s = self.tokens_per_step * self.window_n / elapsed
        metrics = {
            "step": done,
            "loss": mean.item() / self.world,
            "lr": lr,
            "tokens_per_s": tokens_per_s,
            # The step this attempt resumed from (0: a fresh start).
            "resumed_from": resumed_from,
        }
        throughput = self.throughput(tokens_per_s)
        metrics.update(throughput)
        if self.rank == 0 and throughput:
            self.publish_throughput(throughput)
        self.window_loss, self.window_n = 0.0, 0
        return metrics

    def throughput(self, tokens_per_s: float) -> dict[str, float]:
        """Tokens/s per GPU and model FLOPs utilisation against the GPU's dense bf16 peak (empty
        on CPU workers; no MFU without the plan's peak and FLOPs per token)."""
        if not self.gpus:
            return {}
        per_gpu = tokens_per_s / self.gpus
        out = {"tokens_per_s_per_gpu": per_gpu}
        if self.peak_tflops_per_gpu and self.model_flops_per_token:
            out["mfu"] = per_gpu * self.model_flops_per_token / (self.peak_tflops_per_gpu * 1e12)
        return out

    def publish_throughput(self, throughput: dict[str, float]) -> None:
        """Tokens/s per GPU and MFU as Prometheus gauges (Ray's metrics API, run-name label;
        manifests/dashboards.py's Throughput panel)."""
        from config import observability as obs

        if self._throughput_gauges is None:
            from ray.util.metrics import Gauge

            keys = (obs.TRAIN_GOODPUT_RUN_LABEL,)
            self._throughput_gauges = {
                "tokens_per_s_per_gpu": Gauge(
                    obs.TRAIN_TOKENS_PER_S_PER_GPU, description="Training tokens/s per GPU.", tag_keys=keys
                ),
                "mfu": Gauge(
                    obs.TRAIN_MFU,
                    description="Model FLOPs utilisation against the GPU's dense bf16 peak.",
                    tag_keys=keys,
                ),
            }
        for name, value in throughput.items():
            self._throughput_gauges[name].set(value, tags={obs.TRAIN_GOODPUT_RUN_LABEL: self.run_name})

    def report(self, metrics: dict[str, Any], finished: list[tuple[Checkpoint, str]], *, force: bool) -> None:
        """``metrics`` to Ray Train, with the saves that are done (``Checkpointer.save``);
        ``force``: write the goodput ledger now."""
        import ray.train
        from ray.train import CheckpointUploadMode

        t_report = time.perf_counter()
        if not finished:
            ray.train.report(metrics)
        for checkpoint, name in finished:
            # Already in the run's directory with every shard and the manifest written: Ray
            # Train only records it (and deletes those beyond num_to_keep).
            ray.train.report(
                metrics,
                checkpoint=checkpoint,
                checkpoint_dir_name=name,
                checkpoint_upload_mode=CheckpointUploadMode.NO_UPLOAD,
            )
        warning = self.pacing.add(time.perf_counter() - t_report, time.perf_counter() - self.loop_t0, self.poll_s)
        if warning and self.rank == 0:
            log.warning(warning)
        self.accounts.charge("other")
        self.accounts.publish(force=force)
        self.window_t0 = time.perf_counter()

    def finish(self) -> None:
        if self.rank == 0:
            print(f"TRAIN done step={self.steps} t={time.time():.3f}", flush=True)
            print(f"TRAIN goodput {self.accounts.accounts.summary()}", flush=True)
