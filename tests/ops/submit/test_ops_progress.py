"""The progress display: steps, resumes and failures from the job's own log lines, and RayJob
status transitions."""

from __future__ import annotations

import pytest

from ops.submit.progress import JobProgress, LogEvent, ServiceProgress, parse_line
from tests.ops.fakes import rayjob, rayservice

WORKER = "(RayTrainWorker pid=4182, ip=10.11.3.17) "


@pytest.mark.parametrize(
    ("line", "event"),
    [
        # The training workload's own lines (workloads/training/job.py), with Ray's worker prefix.
        (WORKER + "TRAIN start step=0 (no checkpoint) t=1764676800.123", LogEvent("step", step=0)),
        (WORKER + "TRAIN step=120 loss=2.3140 t=1764676900.456", LogEvent("step", step=120, loss=2.314)),
        (
            WORKER + "TRAIN resume step=100 from=/fsx/checkpoints/hpray-dev-train/checkpoint_000100 t=1764677000.1",
            LogEvent("resume", step=100),
        ),
        (WORKER + "TRAIN done step=1000 t=1764679000.0", LogEvent("step", step=1000)),
        (WORKER + "TRAIN injected failure after step 150", LogEvent("failure")),
        ("TRAIN finished step=20000 loss=1.2345 tokens_per_s=812345", LogEvent("step", step=20000, loss=1.2345)),
        ("TRAIN failed: TrainingFailedError: worker group failed after 10 retries", LogEvent("failure")),
        # Other common shapes.
        ('{"step": 40, "total_steps": 400, "loss": 3.5, "lr": 0.0003}', LogEvent("step", step=40, total=400, loss=3.5)),
        (
            "2026-12-02 12:01:02,345 INFO trainer.py:88 -- step 40/400 | loss: 3.50e+00",
            LogEvent("step", step=40, total=400, loss=3.5),
        ),
        ("INFO checkpoint saved to s3://bucket/run/checkpoint_000200 at step 200", LogEvent("checkpoint", step=200)),
        ("Restored checkpoint from /fsx/run/checkpoint_000300 (step 300)", LogEvent("resume", step=300)),
        ("(TrainController pid=77) Restarting training worker group after encountering failures.", LogEvent("failure")),
        ("A worker node 10.11.3.17 died unexpectedly", LogEvent("failure")),
    ],
)
def test_parse_line(line, event):
    got = parse_line(line)
    assert got is not None
    assert (got.kind, got.step, got.total, got.loss) == (event.kind, event.step, event.total, event.loss)


@pytest.mark.parametrize(
    "line",
    [
        "",
        "Installing dependencies...",
        "steps_per_epoch=12",
        "2026-12-02 12:00:00 INFO -- Started a local Ray instance.",
        "step",
    ],
)
def test_lines_without_progress(line):
    assert parse_line(line) is None


def test_a_run_with_a_failure_and_a_resume():
    p = JobProgress("hpray-dev-train")
    printed = []
    printed += p.observe_status(rayjob("new"))
    printed += p.observe_status(rayjob("initializing"))
    printed += p.observe_status(rayjob("running"))
    t = 1000.0
    for step in (0, 50, 100, 150):
        printed += p.observe_log(f"TRAIN step={step} loss={4 - step / 100:.4f}", now=t + step)
    printed += p.observe_log("INFO checkpoint saved at step 100", now=t + 150)
    printed += p.observe_log("TRAIN injected failure after step 150", now=t + 151)
    printed += p.observe_status(rayjob("retrying"))
    printed += p.observe_status(rayjob("running-again"))
    printed += p.observe_log("TRAIN resume step=100 from=/fsx/checkpoints/run/checkpoint_000100", now=t + 300)
    printed += p.observe_log("TRAIN step=120 loss=2.8000", now=t + 320)
    assert printed == [
        "hpray-dev-train: New/- -> Initializing/-",
        "hpray-dev-train: Initializing/- -> Running/RUNNING",
        "hpray-dev-train: failure in the job log: TRAIN injected failure after step 150",
        "hpray-dev-train: Running/RUNNING -> Retrying/FAILED (AppFailed: Job entrypoint command failed with exit code 1)",
        "hpray-dev-train: attempt 1 failed; KubeRay retries the RayJob on a fresh Ray cluster (spec.backoffLimit) and training resumes from its latest checkpoint",
        "hpray-dev-train: Retrying/FAILED -> Running/RUNNING",
        "hpray-dev-train: resumed from checkpoint at step 100",
    ]
    # The rate restarts at the resume: 20 steps in 20 s.
    assert (
        p.line()
        == "[RUNNING]  step 120  loss 2.8000  1.00 steps/s  checkpoint @100  resumed 1x (last from step 100)  failed attempts 1"
    )
    assert not p.finished
    p.observe_status(rayjob("complete"))
    assert p.finished and p.succeeded


def test_progress_line_with_a_known_total_shows_percent_and_eta():
    p = JobProgress("j")
    p.observe_status(rayjob("running"))
    p.observe_log('{"step": 100, "total_steps": 1000, "loss": 3.25}', now=0.0)
    p.observe_log('{"step": 200, "total_steps": 1000, "loss": 3.0}', now=50.0)
    assert p.line() == "[RUNNING]  step 200/1000 (20.0%)  loss 3.0000  2.00 steps/s  ETA 6m40s"


def test_failed_job_is_finished_not_succeeded():
    p = JobProgress("j")
    p.observe_status(rayjob("failed"))
    assert p.finished and not p.succeeded
    assert p.line() == "[FAILED]  waiting for the first step  failed attempts 3"


def test_service_progress_until_ready():
    s = ServiceProgress("hpray-dev-serve")
    assert s.observe_status(rayservice(False)) == [
        "hpray-dev-serve: - -> -, ready=no (Initializing)",
        "hpray-dev-serve: application llm - -> DEPLOYING",
    ]
    assert s.observe_status(rayservice(True)) == [
        "hpray-dev-serve: - -> Running, ready=yes (NonZeroServeEndpoints)",
        "hpray-dev-serve: application llm DEPLOYING -> RUNNING",
    ]
    assert s.ready and s.line() == "[Running] ready=yes  llm=RUNNING"


def test_the_jobs_evaluation_is_in_its_view():
    """The training job's evaluation lines (training.eval_every_steps: Reporter.evaluated) reach
    hpray's job view: the latest validation loss, perplexity and bits per byte with their step."""
    line = (
        WORKER + "TRAIN eval val_step=1000 val_loss=2.512300 val_perplexity=12.333400 "
        "val_bits_per_byte=0.912000 val_tokens=65536 t=1764679000.5"
    )
    event = parse_line(line)
    assert event is not None and (event.kind, event.step) == ("eval", 1000)
    assert dict(event.values) == {"val_loss": 2.5123, "val_perplexity": 12.3334, "val_bits_per_byte": 0.912}
    p = JobProgress("train-x")
    p.observe_log(WORKER + "TRAIN step=1000 loss=2.4000 t=1764678999.0", 0.0)
    assert p.observe_log(line, 1.0) == []
    assert "val loss 2.5123 ppl 12.33 bpb 0.912 @1000" in p.line()
    assert p.as_dict()["evaluation"] == {
        "step": 1000,
        "val_loss": 2.5123,
        "val_perplexity": 12.3334,
        "val_bits_per_byte": 0.912,
    }
