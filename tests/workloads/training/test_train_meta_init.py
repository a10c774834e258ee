"""FSDP models are built on the meta device and each rank initialises only its own shards
(``workloads.training.parallelize.build_model``): the same weights, bitwise, as building the whole model
from the seed, and a model larger than one worker's memory budget never exists whole on a rank.
A process per rank, gloo, no Ray (meta_init_rank.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rigs.local_cluster import REPO_ROOT, free_port

pytestmark = pytest.mark.slow  # process groups of real processes
RANK = Path(__file__).with_name("meta_init_rank.py")
# ~95M parameters (380 MB in fp32); its largest tensor is 11.5 MB.
LARGE = {
    "arch": "llama",
    "n_layer": 8,
    "n_embd": 1024,
    "n_head": 8,
    "n_kv_head": 4,
    "ffn_hidden": 2816,
    "block_size": 64,
}
LARGEST_TENSOR = 2816 * 1024 * 4


def _run(world: int, model: dict) -> list[dict]:
    port = free_port()
    # A fixed mmap threshold: freed temporaries go back to the system, so resident memory
    # measures the tensors alive (glibc's adaptive threshold keeps freed 10 MB blocks resident).
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "MALLOC_MMAP_THRESHOLD_": str(1 << 20)}
    procs = [
        subprocess.Popen(
            [sys.executable, str(RANK), str(r), str(world), str(port), json.dumps(model)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(world)
    ]
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=180)
        assert p.returncode == 0, out[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def test_model_larger_than_a_workers_budget_initialises_sharded():
    """Two ranks, a worker budget of 60 % of the model's parameter bytes: the sharded
    initialisation stays within it (each rank holds half, plus one whole tensor at a time); the
    whole model, built the old way in the same process afterwards, does not."""
    for r in _run(2, LARGE):
        full, held = r["full"], r["held"]
        budget = 0.6 * full
        assert r["bitwise"], r
        assert held == pytest.approx(full / 2, rel=0.01)
        sharded = r["sharded_peak"] - r["before"]
        whole = r["whole_peak"] - r["before"]
        print(
            f"rank {r['rank']}: sharded init +{sharded / 2**20:.0f} MiB, whole build +{whole / 2**20:.0f} MiB "
            f"of a {full / 2**20:.0f} MiB model (budget {budget / 2**20:.0f} MiB)"
        )
        assert sharded < budget
        assert sharded <= held + 2 * LARGEST_TENSOR + (16 << 20)
        assert whole >= full > budget


@pytest.mark.parametrize(
    ("world", "model"), [(3, {"arch": "gpt", "n_layer": 2, "n_embd": 96, "n_head": 4}), (2, {"arch": "llama"})]
)
def test_sharded_initialisation_is_bitwise_the_whole_builds(world, model):
    """Tied embeddings (GPT), LayerNorm biases, rotary tables, and shards of uneven size (3 ranks)."""
    results = _run(world, model)
    assert [r["bitwise"] for r in results] == [True] * world
    assert sum(r["held"] for r in results) == results[0]["full"]
