"""Sharded checkpoints (torch.distributed.checkpoint, one process per rank, gloo, no Ray): the
manifest covers every rank's shards; a truncated or missing shard, or a save killed half-way,
never passes verification, and loading falls back to the previous checkpoint."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from rigs.local_cluster import REPO_ROOT, free_port
from workloads.common import checkpoint as ck

pytestmark = pytest.mark.slow  # process groups of real processes
SAVER = Path(__file__).with_name("sharded_saver.py")


def _ranks(directory: Path, world: int, steps: str, slow_rank: int | None = None):
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    args = [str(port), str(directory), steps] + ([str(slow_rank)] if slow_rank is not None else [])
    return [
        subprocess.Popen(
            [sys.executable, str(SAVER), str(r), str(world), *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(world)
    ]


@pytest.fixture(scope="module")
def two_saves(tmp_path_factory):
    """Checkpoints after steps 10 and 20 of a 2-rank FSDP2 model."""
    run = tmp_path_factory.mktemp("sharded") / "run"
    procs = _ranks(run, 2, "10,20")
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0, out[-3000:]
    return run


def _copy(run: Path, tmp_path: Path) -> Path:
    import shutil

    shutil.copytree(run, tmp_path / "run")
    return tmp_path / "run"


def test_manifest_covers_every_rank_shard_and_is_last(two_saves):
    newest = two_saves / ck.dir_name(20)
    manifest = json.loads((newest / ck.MANIFEST).read_text())
    assert manifest["format"] == ck.SHARDED_FORMAT and manifest["ranks"] == 2 and manifest["step"] == 20
    assert set(manifest["files"]) == {"__0_0.distcp", "__1_0.distcp", ".metadata", "meta.json"}
    for name, entry in manifest["files"].items():
        assert (newest / name).stat().st_size == entry["size"] > 0
    # Written after every other file (no side files left behind).
    others = [p for p in newest.iterdir() if p.name != ck.MANIFEST]
    assert sorted(p.name for p in others) == sorted(manifest["files"])
    assert all(p.stat().st_mtime_ns <= (newest / ck.MANIFEST).stat().st_mtime_ns for p in others)
    assert ck.verify(str(newest)) == []


def test_gathered_in_one_process(two_saves):
    loaded = ck.load(str(two_saves / ck.dir_name(20)), keys=["model"])
    assert loaded.step == 20 and loaded.meta == {"step": 20, "world_size": 2}
    weights = loaded.state["model"]
    assert weights["layers.0.attn.wq.weight"].shape == (64, 64)  # whole, not a shard
    assert torch.isfinite(weights["head.weight"]).all()


def test_truncated_shard_of_one_rank_falls_back(two_saves, tmp_path, caplog):
    run = _copy(two_saves, tmp_path)
    newest = run / ck.dir_name(20)
    size = (newest / "__1_0.distcp").stat().st_size
    with open(newest / "__1_0.distcp", "r+b") as f:
        f.truncate(size // 2)
    with caplog.at_level(logging.INFO, logger="workloads.checkpoint"):
        loaded = ck.load_latest_valid(str(tmp_path), "run", keys=[])
    assert loaded.step == 10
    assert f"__1_0.distcp is {size // 2} bytes, the manifest says {size}" in caplog.text


def test_missing_shard_of_one_rank_falls_back(two_saves, tmp_path):
    run = _copy(two_saves, tmp_path)
    os.remove(run / ck.dir_name(20) / "__0_0.distcp")
    assert ck.verify(str(run / ck.dir_name(20))) == ["__0_0.distcp is missing"]
    assert ck.load_latest_valid(str(tmp_path), "run", keys=[]).step == 10


def test_rank_killed_during_async_save_leaves_nothing_that_verifies(tmp_path):
    """Rank 1 stalls before writing its shard of the step-20 save; rank 0 has written its own.
    Killing both (a node lost mid-save ends the job) leaves a half-written directory that never
    verifies, and the step-10 checkpoint is used."""
    run = tmp_path / "run"
    procs = _ranks(run, 2, "10,20", slow_rank=1)
    half = run / ck.dir_name(20)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (half / "__0_0.distcp").exists():
        time.sleep(0.1)
    try:
        assert (half / "__0_0.distcp").exists(), "rank 0 never wrote its shard"
        time.sleep(0.5)
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=30)
    assert (half / "__0_0.distcp").exists() and not (half / "__1_0.distcp").exists()
    assert ck.verify(str(half)) == ["no manifest.json (the checkpoint was not completely written)"]
    assert ck.load_latest_valid(str(tmp_path), "run", keys=[]).step == 10
