"""The goodput accounts of workloads/training/goodput.py: every second in one bucket, continued
across a resume, the steps after the restored checkpoint moved to ``redone``."""

from __future__ import annotations

import json

import pytest

from workloads.training import goodput
from workloads.training.goodput import BUCKETS, Accounts, Tracker


class Clock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def tick(self, dt: float) -> None:
        self.t += dt


def _run_steps(a: Accounts, clock: Clock, first: int, last: int, *, step_s: float, ckpt_every: int) -> None:
    """Steps first..last (inclusive) of ``step_s`` each, a 0.5 s save and 0.1 s report at each
    checkpoint step, as the job charges them."""
    for done in range(first, last + 1):
        clock.tick(step_s)
        a.step_done(done)
        if done % ckpt_every == 0:
            clock.tick(0.05)
            a.charge("other")
            a.checkpoint_taken(done)
            clock.tick(0.5)
            a.charge("checkpoint")
            clock.tick(0.1)
            a.charge("other")


def test_buckets_add_up_to_the_wall_time_of_an_uninterrupted_run():
    clock = Clock()
    submitted = clock.t
    a = Accounts(submitted=submitted, clock=clock)
    clock.tick(3.0)  # scheduling until the worker process starts
    process_start = clock.t
    clock.tick(2.0)  # imports, model build
    a.begin_attempt(process_start=process_start)
    _run_steps(a, clock, 1, 100, step_s=0.25, ckpt_every=20)
    wall = clock.t - submitted
    assert abs(a.wall - wall) <= 0.01 * wall
    assert a.seconds == pytest.approx(
        {"productive": 25.0, "redone": 0.0, "checkpoint": 2.5, "startup": 2.0, "waiting": 3.0, "other": 0.75}
    )
    assert a.goodput == pytest.approx(25.0 / 33.25)


def test_a_resume_continues_the_accounts_and_moves_the_lost_steps_to_redone():
    clock = Clock()
    submitted = clock.t
    a = Accounts(submitted=submitted, clock=clock)
    clock.tick(1.0)
    a.begin_attempt(process_start=clock.t)
    _run_steps(a, clock, 1, 47, step_s=1.0, ckpt_every=20)  # checkpoints at 20 and 40
    saved = json.loads(json.dumps(a.to_dict()))  # the ledger file, as written before the failure
    clock.tick(1.5)  # steps after the last record, then the failure
    clock.tick(30.0)  # detection, node replacement
    process_start = clock.t
    clock.tick(4.0)  # start-up and restore
    b = Accounts.from_dict(saved, clock=clock)
    b.begin_attempt(process_start=process_start)
    moved = b.rewind(40)
    assert moved == pytest.approx(7.0)  # steps 41..47
    assert b.seconds["redone"] == pytest.approx(7.0)
    assert b.seconds["productive"] == pytest.approx(40.0)
    assert b.seconds["waiting"] == pytest.approx(1.0 + 1.5 + 30.0)
    assert b.seconds["startup"] == pytest.approx(4.0)
    assert b.step == 40 and b.attempts == 2
    _run_steps(b, clock, 41, 60, step_s=1.0, ckpt_every=20)
    wall = clock.t - submitted
    assert abs(b.wall - wall) <= 0.01 * wall
    assert b.seconds["productive"] == pytest.approx(60.0)
    assert b.seconds["checkpoint"] == pytest.approx(1.5)
    assert b.goodput == pytest.approx(60.0 / wall)


def test_a_resume_from_an_older_checkpoint_moves_everything_after_it():
    clock = Clock()
    a = Accounts(submitted=clock.t, clock=clock)
    a.begin_attempt(process_start=clock.t)
    _run_steps(a, clock, 1, 45, step_s=2.0, ckpt_every=20)
    # The checkpoint at 40 was torn: the run falls back to 20.
    assert a.rewind(20) == pytest.approx(50.0)
    assert a.seconds["productive"] == pytest.approx(40.0)
    assert sorted(a.marks) == [20]
    # No checkpoint at all: every step is redone.
    b = Accounts(submitted=clock.t, clock=clock)
    _run_steps(b, clock, 1, 5, step_s=1.0, ckpt_every=20)
    assert b.rewind(0) == pytest.approx(5.0) and b.seconds["productive"] == 0.0


def test_a_fresh_attempt_without_failure_moves_nothing():
    clock = Clock()
    a = Accounts(submitted=clock.t, clock=clock)
    a.begin_attempt(process_start=clock.t)
    assert a.rewind(0) == 0.0 and a.step == 0


def test_tracker_writes_the_ledger_and_the_next_attempt_continues_it(tmp_path):
    clock = Clock()
    meta_record = None
    t = Tracker.begin(
        enabled=True,
        run_name="r",
        run_dir=str(tmp_path),
        submitted=clock.t - 5.0,
        process_start=clock.t - 1.0,
        restored_step=0,
        checkpoint_meta=None,
        clock=clock,
        export=False,
    )
    for done in range(1, 31):
        clock.tick(0.5)
        t.step_done(done)
        if done % 10 == 0:
            meta_record = t.checkpoint_record(done)
            clock.tick(0.2)
            t.charge("checkpoint")
            t.publish(force=True)
    on_disk = goodput.read_ledger(str(tmp_path))
    assert on_disk is not None and on_disk["step"] == 30 and on_disk["seconds"]["checkpoint"] == pytest.approx(0.6)
    # The ledger is newer than the checkpoint's meta: it wins.
    assert goodput.newest(meta_record, on_disk) is on_disk
    clock.tick(12.0)  # failure, replacement; the new process started 2 s ago
    t2 = Tracker.begin(
        enabled=True,
        run_name="r",
        run_dir=str(tmp_path),
        submitted=None,
        process_start=clock.t - 2.0,
        restored_step=20,
        checkpoint_meta={"goodput": meta_record},
        clock=clock,
        export=False,
    )
    assert t2.accounts.seconds["redone"] == pytest.approx(5.0)  # steps 21..30
    assert t2.accounts.seconds["waiting"] == pytest.approx(4.0 + 10.0)
    assert t2.accounts.seconds["startup"] == pytest.approx(1.0 + 2.0)
    assert set(t2.accounts.seconds) == set(BUCKETS)


def test_disabled_tracker_keeps_nothing_and_writes_nothing(tmp_path):
    t = Tracker.begin(
        enabled=False,
        run_name="r",
        run_dir=str(tmp_path),
        submitted=None,
        process_start=0.0,
        restored_step=0,
        checkpoint_meta=None,
    )
    t.step_done(1)
    assert t.checkpoint_record(1) is None
    t.publish(force=True)
    assert list(tmp_path.iterdir()) == []


def test_steps_rewrite_the_ledger_every_persist_interval(tmp_path):
    """Between checkpoints the ledger is rewritten from the step loop every ``persist_every_s``,
    so a failure leaves at most that much work off the record (and out of ``redone``)."""
    clock = Clock()
    t = Tracker.begin(
        enabled=True,
        run_name="r",
        run_dir=str(tmp_path),
        submitted=clock.t,
        process_start=clock.t,
        restored_step=0,
        checkpoint_meta=None,
        clock=clock,
        persist_every_s=5.0,
        export=False,
    )
    for done in range(1, 24):  # 1 s steps, no report, no checkpoint
        clock.tick(1.0)
        t.step_done(done)
    assert goodput.read_ledger(str(tmp_path))["step"] == 21  # written at steps 1, 6, 11, 16, 21
    # The run fails after step 23 and resumes from a checkpoint at step 0: 21 recorded steps redone.
    clock.tick(3.0)
    resumed = Tracker.begin(
        enabled=True,
        run_name="r",
        run_dir=str(tmp_path),
        submitted=None,
        process_start=clock.t,
        restored_step=0,
        checkpoint_meta=None,
        clock=clock,
        export=False,
    )
    assert resumed.accounts.seconds["redone"] == pytest.approx(21.0)
    assert resumed.accounts.seconds["waiting"] == pytest.approx(2.0 + 3.0)


def test_a_ledger_write_error_is_logged_once_and_training_goes_on(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    t = Tracker(enabled=True, run_name="r", run_dir=str(blocker / "run"), export=False)
    t.publish(force=True)
    t.publish(force=True)
    assert [r.message.split(":")[0] for r in caplog.records] == ["goodput"]
    assert "training goes on" in caplog.records[0].message
    # A run directory that does not exist yet is created.
    t2 = Tracker(enabled=True, run_name="r", run_dir=str(tmp_path / "new" / "run"), export=False)
    t2.publish(force=True)
    assert goodput.read_ledger(str(tmp_path / "new" / "run")) is not None
