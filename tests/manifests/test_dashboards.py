"""The shipped Grafana dashboards (docs/dashboards/) are the pinned Ray's own, and the managed
collector writes the labels their variables filter on."""

from __future__ import annotations

import json

from constructs import observability as co

from config import load_environment
from manifests import dashboards


def test_committed_dashboards_are_the_pinned_rays(capsys):
    assert dashboards.main(["--check"]) == 0, capsys.readouterr().out


def test_check_reports_a_stale_or_foreign_file(tmp_path, capsys):
    assert dashboards.main([str(tmp_path)]) == 0
    (tmp_path / "ray-default.json").write_text("{}\n")
    (tmp_path / "ray-old.json").write_text("{}\n")
    assert dashboards.main(["--check", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "ray-default.json differs from the pinned Ray's" in out
    assert "ray-old.json is not a dashboard of the pinned Ray; remove it" in out


def test_every_dashboard_asks_for_a_prometheus_data_source_and_its_cluster_label_is_scraped():
    dev = load_environment("dev")
    scrape = co.scrape_configuration(dev.observability, cluster_name=dev.eks_cluster_name)
    ray_job = next(j for j in scrape["scrape_configs"] if j["job_name"] == "ray")
    written = {r.get("target_label") for r in ray_job["relabel_configs"]}
    for name in dashboards.grafana_dashboards():
        data = json.loads((dashboards.DEFAULT_DIR / f"ray-{name}.json").read_text())
        variables = {v["name"]: v for v in data["templating"]["list"]}
        assert variables["datasource"]["query"] == "prometheus", name
        cluster = variables.get("Cluster")
        if cluster is not None:
            # KubeRay's pod label ray.io/cluster as ray_io_cluster: the Cluster filter's label.
            assert "ray_io_cluster" in cluster["definition"]
            assert "ray_io_cluster" in written


def test_the_training_dashboard_plots_every_quality_gauge_the_job_sets():
    """Validation loss, perplexity, bits per byte, training loss and gradient norm: each gauge of
    config/observability.py TRAIN_QUALITY_GAUGES (which the job's Reporter sets) has a query on
    the training dashboard, filtered on its run and session variables."""
    from config import observability as obs
    from manifests.dashboards import grafana_dashboards

    train = grafana_dashboards()["train"]
    exprs = [t["expr"] for p in train["panels"] for t in p.get("targets", [])]
    for gauge in obs.TRAIN_QUALITY_GAUGES.values():
        series = obs.prometheus_name(gauge)
        assert [e for e in exprs if f"{series}{{" in e and "$TrainRunName" in e], series
