"""Ray's own Grafana dashboards against a real Prometheus scraping a real local Ray cluster."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rigs import prom_rehearsal
from workloads.training.goodput import BUCKETS


def test_every_shipped_dashboard_has_queries_and_no_variable_survives():
    boards = prom_rehearsal.dashboards()
    assert {"default", "serve", "serve_deployment", "train", "data"} <= set(boards)
    for name, exprs in boards.items():
        assert exprs, name
        for _, expr in exprs:
            assert "$" not in prom_rehearsal.as_grafana_would(expr)


def test_grafana_variables_become_match_all_and_intervals():
    assert prom_rehearsal.as_grafana_would('rate(x{a=~"$Instance"}[$__rate_interval])') == 'rate(x{a=~".*"}[1m])'
    assert prom_rehearsal.as_grafana_would("sum_over_time(y[$interval])") == "sum_over_time(y[1m])"


@pytest.mark.slow
@pytest.mark.ray_cluster
def test_dashboard_queries_evaluate_against_a_real_prometheus():
    out = subprocess.run([sys.executable, "-m", "rigs.prom_rehearsal"], capture_output=True, text=True, timeout=900)
    summary = json.loads(out.stdout[out.stdout.index("{") :])
    # Every series the checks read was scraped before the deadline (a loaded machine is slower).
    assert summary["ready"], f"not every series scraped within {summary['scrape_seconds']} s"
    assert summary["errors"] == [], summary["errors"][:5]
    assert summary["targets_up"] >= 2 and summary["targets_up"] == summary["scrape_targets"]
    dash = summary["dashboards"]
    assert all(d["evaluated"] == d["queries"] for d in dash.values())
    # Core panels the run exercises (tasks, actors, nodes) return data.
    assert dash["default"]["with_series"] >= 10, dash["default"]
    # The training job's goodput gauges, set through Ray's metrics API by the job's own Tracker,
    # are what the training dashboard's Goodput panels and the TrainingGoodputLow alert query.
    goodput = summary["goodput"]
    assert len(goodput) == 4, goodput  # whole run, last hour, buckets; the alert
    for title, found in goodput.items():
        assert found["status"] == "success" and found["runs"] == [prom_rehearsal.GOODPUT_RUN], (title, found)
        if title.startswith("Wall Time by Goodput Bucket ::"):
            assert found["buckets"] == sorted(BUCKETS), (title, found)
        else:
            assert all(0 < v <= 1 for v in found["values"]), (title, found)
