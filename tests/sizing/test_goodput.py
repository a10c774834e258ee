"""The goodput sweep on paper (sizing/goodput.py): expected goodput, the Young/Daly optimum and
the synth warning of a production interval far from it, with hand-computed numbers."""

from __future__ import annotations

import math

import pytest

from config import load_environment
from config.loader import parse_environment
from manifests import registry
from sizing import goodput
from sizing.plan import checkpoint_interval_warning
from tests.config.config_data import env_data


def test_expected_goodput_by_hand():
    # tau 1000 s, delta 50 s, R 100 s, M 10,000 s: 1000/1050 x (1 - (100 + 525) / 10000) = 0.952381 x 0.9375.
    assert goodput.expected_goodput(1000, 50, 100, 10_000) == pytest.approx(0.892857, abs=1e-6)
    # No failures to speak of: only the checkpoints cost.
    assert goodput.expected_goodput(1000, 50, 0, 1e18) == pytest.approx(1000 / 1050)
    # Failures faster than a segment: nothing is kept.
    assert goodput.expected_goodput(1000, 50, 100, 500) == 0.0


def test_the_optimum_is_sqrt_2_delta_mtbf_and_maximizes_goodput():
    assert goodput.optimal_interval(50, 10_000) == 1000.0
    best = goodput.optimal_interval(35.7, 5.7e6)
    g = goodput.expected_goodput(best, 35.7, 756, 5.7e6)
    for tau in (best / 3, best / 1.5, best * 1.5, best * 3):
        assert goodput.expected_goodput(tau, 35.7, 756, 5.7e6) < g


def test_sweep_by_hand():
    # 4 nodes of 10 h MTBF: 9,000 s; 100 steps of 10 s = 1,000 s; optimum sqrt(2 x 50 x 9000) = 948.7 s.
    s = goodput.sweep(
        nodes=4,
        node_mtbf_hours=10,
        downtime_seconds=100,
        write_seconds=50,
        step_seconds=10,
        interval_steps=100,
        run_steps=10_000,
    )
    assert s.mtbf_seconds == 9000
    assert s.goodput == pytest.approx(1000 / 1050 * (1 - (100 + 525) / 9000))
    assert s.optimal_interval_seconds == pytest.approx(math.sqrt(900_000))
    assert s.optimal_steps == 95
    assert s.factor == pytest.approx(1000 / 948.683, abs=1e-5)
    assert not s.far
    assert goodput.warning(s) is None
    assert s.goodput_at(100) == s.goodput


def test_warning_names_the_factor_and_both_goodputs():
    s = goodput.sweep(
        nodes=4,
        node_mtbf_hours=10,
        downtime_seconds=100,
        write_seconds=50,
        step_seconds=10,
        interval_steps=10,
        run_steps=10_000,
    )
    # 100 s against 948.7 s: 9.5x shorter; goodput 100/150 x (1 - (100 + 75)/9000) = 65.37 %; at the
    # optimum 948.7/998.7 x (1 - (100 + 499.3)/9000) = 88.67 %.
    assert s.far
    assert goodput.warning(s) == (
        "training.checkpoint_every_steps: 10 steps (100.0 s at an estimated 10 s per step) is 9.5x shorter than "
        "the Young/Daly optimum sqrt(2 x 50.0 s write x 2.5 h MTBF of 4 nodes) = 15.8 min (95 steps): expected "
        "goodput 65.37% against 88.67% at the optimum"
    )


def test_prod_warns_at_synth_with_its_numbers():
    prod = load_environment("prod")
    g = registry.plan_of(prod).checkpoint.goodput
    # 4 p5 nodes: 6334 h / 4 = 1583.5 h; write 41.11 s (96.36 GB at 2343.75 MB/s: the 7B shape with
    # Llama 3's 128256-token vocabulary, 8.03 B parameters x 12 bytes); 1000 steps x 2.1888 s.
    assert g.mtbf_seconds == 6334 * 3600 / 4
    assert g.write_seconds == pytest.approx(96_363_134_976 / 2_343_750_000, abs=1e-6)
    assert g.write_seconds == pytest.approx(41.115, abs=1e-3)
    assert g.interval_seconds == pytest.approx(2188.8, abs=0.1)
    assert g.optimal_interval_seconds == pytest.approx(math.sqrt(2 * 41.115 * 5_700_600), rel=1e-4)
    assert g.downtime_seconds == pytest.approx(600 + 120 + 41.115, abs=1e-3)
    assert checkpoint_interval_warning(prod, registry.plan_of(prod)) == (
        "training.checkpoint_every_steps: 1000 steps (36.5 min at an estimated 2.19 s per step) is 9.9x shorter "
        "than the Young/Daly optimum sqrt(2 x 41.1 s write x 1583.5 h MTBF of 4 nodes) = 6.0 h (9891 steps): "
        "expected goodput 98.12% against 99.61% at the optimum"
    )


def test_prod_near_the_optimum_does_not_warn():
    data = env_data("prod")
    data["training"].update(checkpoint_every_steps=5000)
    cfg = parse_environment(data, source="prod.yaml")
    assert checkpoint_interval_warning(cfg, registry.plan_of(cfg)) is None


def test_other_environments_do_not_warn():
    staging, dev = load_environment("staging"), load_environment("dev")
    assert registry.plan_of(staging).checkpoint.goodput.far  # it checkpoints often on purpose
    assert registry.plan_of(dev).checkpoint.goodput.far  # a short interval for a short run, on purpose
    assert (
        checkpoint_interval_warning(staging, registry.plan_of(staging)) is None
        and checkpoint_interval_warning(dev, registry.plan_of(dev)) is None
    )
