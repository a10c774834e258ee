"""ReportPacing: the one-time warning when report() sets the pace of training (no Ray needed)."""

from __future__ import annotations

from workloads.training.reporter import ReportPacing


def test_warns_once_when_reports_block_more_than_the_fraction():
    pacing = ReportPacing(10, warn_fraction=0.05, min_reports=3)
    # Reports every 2.0 s of loop time, each blocked 0.3 s (15 %): silent until the third report.
    assert pacing.add(0.3, 2.0, "2") is None
    assert pacing.add(0.3, 4.0, "2") is None
    warning = pacing.add(0.3, 6.0, "2")
    assert warning == (
        "ray.train.report() blocked 0.9 s of 6.0 s of training (15 %, 3 reports): reports every 10 "
        "steps come 2.0 s apart, faster than Ray Train's controller takes them (one per poll, "
        "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S=2). Raise training.report_every_steps, or set "
        "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S below 2.0 s."
    )
    assert pacing.add(0.3, 8.0, "2") is None  # once only


def test_silent_when_reports_are_cheap():
    pacing = ReportPacing(50, warn_fraction=0.05, min_reports=3)
    for i in range(1, 20):
        assert pacing.add(0.005, 10.0 * i, "2") is None  # 0.05 % of the loop
    assert pacing.reports == 19 and round(pacing.blocked_s, 3) == 0.095
