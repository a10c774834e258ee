"""bench/token_reader.py: a worker reading a whole epoch of a 256 MiB token corpus keeps its RSS
flat (the same loop over memory maps, the control, shows the measurement sees pages kept), and
reads far faster than a production step consumes."""

from __future__ import annotations

from bench.token_reader import production_need, run
from config import load_environment
from manifests import registry


def test_the_production_need_comes_from_prod_config_and_plan():
    cfg = load_environment("prod")
    need = production_need("prod")
    assert need["tokens_per_step"] == cfg.training.batch_size_per_worker * cfg.training.model.block_size
    checkpoint = registry.plan_of(cfg).checkpoint
    assert checkpoint is not None and need["step_seconds"] == checkpoint.step_seconds


def test_reader_rss_is_flat_and_it_outpaces_a_production_step(tmp_path):
    r = run(256 << 20, str(tmp_path))
    assert r["reader_rss_growth_mib"] <= 16, r
    # The control: reading the same windows through memory maps keeps most of the corpus resident.
    assert r["memmap_rss_growth_mib"] >= 128, r
    assert r["speed_ratio"] >= 100, r
