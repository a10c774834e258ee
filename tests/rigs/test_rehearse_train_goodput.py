"""The training rehearsal's goodput summary and plot panel (rigs/rehearse_train.py), from a
ledger the job's own accounts wrote."""

from __future__ import annotations

from rigs import rehearse_train as rt
from workloads.training.goodput import Accounts, write_ledger


def test_goodput_summary_and_plot_from_the_jobs_ledger(tmp_path):
    clock_t = [100.0]
    a = Accounts(submitted=100.0, clock=lambda: clock_t[0])
    clock_t[0] = 104.0
    a.begin_attempt(process_start=102.0)  # 2 s waiting, 2 s startup
    for step in range(1, 11):
        clock_t[0] += 1.0
        a.step_done(step)
    a.checkpoint_taken(10)
    clock_t[0] += 0.5
    a.charge("checkpoint")
    write_ledger(str(tmp_path), a.to_dict())
    g = rt._goodput(tmp_path)
    assert g == {
        "goodput": round(10.0 / 14.5, 4),
        "wall_s": 14.5,
        "attempts": 1,
        "seconds": {"productive": 10.0, "redone": 0.0, "checkpoint": 0.5, "startup": 2.0, "waiting": 2.0, "other": 0.0},
    }
    assert rt._goodput(tmp_path / "none") is None
    seen = [(s, 3.0 - s / 10, 100.0 + s, 0) for s in range(1, 11)]
    png = rt._plot(seen, [], None, tmp_path / "loss.png", g)
    assert png.stat().st_size > 10_000


def test_plot_without_accounts_keeps_the_loss_panel(tmp_path):
    seen = [(s, 3.0 - s / 10, 100.0 + s, 0) for s in range(1, 11)]
    assert rt._plot(seen, [], None, tmp_path / "loss.png", None).exists()
