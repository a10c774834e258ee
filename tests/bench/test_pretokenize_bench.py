"""bench/pretokenize.py: its Ray run and its one-process baseline make the same dataset (the
ratio compares equal work), and it reports both phases."""

from __future__ import annotations

import pytest

from bench.pretokenize import bench


@pytest.mark.ray_cluster
def test_ray_and_one_process_make_the_same_dataset():
    r = bench(total_bytes=1 << 20, files=2, workers=2)
    assert r["same_dataset"] == 1.0
    assert r["tokens"] > 100_000
    assert r["one_process_tokenize_s"] > 0 and r["ray_tokenize_s"] > 0 and r["speedup"] > 0
