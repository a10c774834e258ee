"""The checkpoint format: manifest written last, torn/corrupt checkpoints detected, fallback."""

from __future__ import annotations

import json
import logging
import os

import pytest
import torch

from workloads.common import checkpoint as ck


def _save(tmp_path, storage, step, value):
    ck.save(
        str(storage / "run" / ck.dir_name(step)),
        {"model": {"w": torch.full((1000,), float(value))}, "rng": [1, 2]},
        meta={"step": step, "data_position": {"epoch": 0, "cursor": step}},
    )
    return storage / "run" / ck.dir_name(step)


@pytest.fixture
def two_checkpoints(tmp_path):
    storage = tmp_path / "storage"
    older = _save(tmp_path, storage, 10, 1.0)
    newer = _save(tmp_path, storage, 20, 2.0)
    return storage, older, newer


def test_roundtrip_and_manifest(two_checkpoints):
    storage, _, newer = two_checkpoints
    manifest = json.loads((newer / "manifest.json").read_text())
    assert manifest["format"] == ck.FORMAT and manifest["step"] == 20
    assert set(manifest["files"]) == {"model.pt", "rng.pt", "meta.json"}
    for name, entry in manifest["files"].items():
        assert (newer / name).stat().st_size == entry["size"]
    loaded = ck.load_latest_valid(str(storage), "run")
    assert loaded.step == 20 and loaded.meta["data_position"]["cursor"] == 20
    assert torch.equal(loaded.state["model"]["w"], torch.full((1000,), 2.0))
    assert ck.list_checkpoints(str(storage), "run") == [(20, str(newer)), (10, str(two_checkpoints[1]))]


def test_truncated_newest_falls_back_and_says_so(two_checkpoints, caplog):
    storage, older, newer = two_checkpoints
    with open(newer / "model.pt", "r+b") as f:
        f.truncate(100)
    with caplog.at_level(logging.INFO, logger="workloads.checkpoint"):
        loaded = ck.load_latest_valid(str(storage), "run")
    assert loaded.step == 10 and loaded.path == str(older)
    assert torch.equal(loaded.state["model"]["w"], torch.full((1000,), 1.0))
    text = caplog.text
    assert f"skipping {newer}" in text and "model.pt is 100 bytes, the manifest says" in text
    assert f"using checkpoint {older} (step 10)" in text


def test_missing_manifest_is_torn(two_checkpoints):
    storage, _, newer = two_checkpoints
    os.remove(newer / "manifest.json")
    assert ck.verify(str(newer)) == ["no manifest.json (the checkpoint was not completely written)"]
    assert ck.load_latest_valid(str(storage), "run").step == 10


def test_same_size_corruption_is_caught_by_checksum(two_checkpoints):
    storage, _, newer = two_checkpoints
    data = bytearray((newer / "model.pt").read_bytes())
    data[-10] ^= 0xFF
    (newer / "model.pt").write_bytes(bytes(data))
    assert ck.verify(str(newer)) == ["model.pt does not match its sha256 in the manifest"]
    assert ck.load_latest_valid(str(storage), "run").step == 10


def test_all_torn_returns_none_and_no_run_returns_none(two_checkpoints, caplog):
    storage, older, newer = two_checkpoints
    for d in (older, newer):
        os.remove(d / "meta.json")
    assert ck.load_latest_valid(str(storage), "run") is None
    assert "none of the 2 checkpoints of run 'run' is intact" in caplog.text
    assert ck.load_latest_valid(str(storage), "other") is None


def test_load_raises_on_torn(two_checkpoints):
    _, _, newer = two_checkpoints
    os.remove(newer / "rng.pt")
    with pytest.raises(ck.CheckpointError, match=r"rng\.pt is missing"):
        ck.load(str(newer))
