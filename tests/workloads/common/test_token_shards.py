"""workloads/common/token_shards.py: shards and manifest written and read back; verification
catches a changed byte, a missing or torn shard, a dataset of another tokenizer, an incomplete
dataset, each as one exact message."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from workloads.common import token_shards as ts
from workloads.common.token_shards import DatasetError, Manifest, SplitInfo, TokenizerInfo

TOK = TokenizerInfo("huggingface", "ab" * 32, 1000, 3, None)


def make_dataset(directory, train: np.ndarray, validation: np.ndarray, shard_tokens: int, tok=TOK) -> Manifest:
    dtype = ts.dtype_for(tok.vocab_size)
    splits = {}
    for name, tokens in (("train", train), ("validation", validation)):
        writer = ts.ShardWriter(directory, name, dtype, shard_tokens)
        # In uneven pieces: the writer cuts shards at shard_tokens whatever the appends.
        for piece in np.array_split(tokens.astype(dtype), 7):
            writer.append(piece)
        splits[name] = SplitInfo(tuple(writer.close()), documents=1)
    manifest = Manifest(directory, dtype, shard_tokens, tok, splits)
    ts.write_manifest(manifest)
    return manifest


@pytest.fixture
def dataset(tmp_path):
    rng = np.random.default_rng(0)
    return make_dataset(tmp_path, rng.integers(0, 1000, 2500), rng.integers(0, 1000, 300), shard_tokens=1000)


def test_shards_are_fixed_size_but_the_last_and_the_manifest_round_trips(dataset):
    m = ts.read_manifest(dataset.directory)
    assert [s.tokens for s in m.shards("train")] == [1000, 1000, 500]
    assert [s.name for s in m.shards("validation")] == ["validation/shard-00000.bin"]
    assert m.dtype == np.uint16 and m.tokenizer == TOK and m.shard_tokens == 1000
    assert m.total_tokens == 2800 == json.loads((m.directory / "manifest.json").read_text())["total_tokens"]
    for s in m.shards():
        data = (m.directory / s.name).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (s.bytes, s.sha256) == (2 * s.tokens, s.sha256)
    ts.verify(m)
    ts.verify(m, shards=[], tokenizer_fingerprint=TOK.fingerprint)


def test_the_dtype_follows_the_vocabulary():
    assert ts.dtype_for(65535) == np.uint16
    assert ts.dtype_for(65536) == np.uint32


def test_uint32_shards_keep_large_ids(tmp_path):
    tok = TokenizerInfo("huggingface", "cd" * 32, 128_256, 128_001, 128_000)
    tokens = np.arange(100_000, 100_050)
    m = make_dataset(tmp_path, tokens, tokens[:5], shard_tokens=32, tok=tok)
    assert m.dtype == np.uint32
    back = np.concatenate([np.fromfile(tmp_path / s.name, dtype="<u4") for s in m.shards("train")])
    assert back.tolist() == tokens.tolist()


def test_ranks_hash_every_shard_once(dataset):
    names = [ts.shards_for_rank(dataset, r, 3) for r in range(3)]
    assert sorted(n for ns in names for n in ns) == sorted(s.name for s in dataset.shards())
    assert all(names)


def test_a_changed_byte_is_caught_by_the_rank_that_hashes_that_shard(dataset):
    shard = dataset.directory / "train/shard-00001.bin"
    data = bytearray(shard.read_bytes())
    data[17] ^= 1
    shard.write_bytes(bytes(data))
    want = dataset.shards("train")[1].sha256
    ts.verify(dataset, shards=["train/shard-00000.bin"])  # sizes all equal; that digest still right
    with pytest.raises(DatasetError) as info:
        ts.verify(dataset, shards=["train/shard-00001.bin"])
    assert str(info.value) == (
        f"dataset {dataset.directory}: shard train/shard-00001.bin has sha256 {hashlib.sha256(data).hexdigest()}, "
        f"the manifest says {want} (the shard changed after it was written)"
    )


def test_a_missing_shard_is_one_message(dataset):
    (dataset.directory / "validation/shard-00000.bin").unlink()
    with pytest.raises(DatasetError) as info:
        ts.verify(dataset, shards=[])
    assert str(info.value) == (
        f"dataset {dataset.directory}: shard validation/shard-00000.bin is missing (the manifest lists 600 bytes)"
    )


def test_a_torn_shard_is_one_message(dataset):
    path = dataset.directory / "train/shard-00002.bin"
    path.write_bytes(path.read_bytes()[:999])
    with pytest.raises(DatasetError) as info:
        ts.verify(dataset, shards=[])
    assert str(info.value) == (
        f"dataset {dataset.directory}: shard train/shard-00002.bin has 999 bytes, the manifest says 1000 "
        "(a torn or partial copy)"
    )


def test_a_dataset_of_another_tokenizer_is_one_message(dataset):
    with pytest.raises(DatasetError) as info:
        ts.verify(dataset, tokenizer_fingerprint="ef" * 32)
    assert str(info.value) == (
        f"dataset {dataset.directory} was tokenized with tokenizer abababababababab (vocab 1000), not the "
        "configured tokenizer efefefefefefefef: pretokenize the corpus with this tokenizer or configure the dataset's"
    )


def test_an_unknown_shard_name_is_one_message(dataset):
    with pytest.raises(DatasetError) as info:
        ts.verify(dataset, shards=["train/shard-00009.bin"])
    assert str(info.value) == (
        f"dataset {dataset.directory}: shard train/shard-00009.bin is not in the manifest; allowed: a name under "
        "splits.*.shards such as train/shard-00000.bin"
    )


def test_no_manifest_means_incomplete(tmp_path):
    with pytest.raises(DatasetError) as info:
        ts.read_manifest(tmp_path)
    assert str(info.value) == (
        f"dataset {tmp_path}: no manifest.json, so the dataset is not complete "
        "(pretokenize writes the manifest after the last shard)"
    )


def test_a_manifest_of_another_format_is_one_message(dataset):
    path = dataset.directory / "manifest.json"
    raw = json.loads(path.read_text())
    raw["version"] = 7
    path.write_text(json.dumps(raw))
    with pytest.raises(DatasetError) as info:
        ts.read_manifest(dataset.directory)
    assert str(info.value) == (
        f"dataset {dataset.directory}: manifest.json has format 'hpray-token-shards' version 7; "
        "allowed: 'hpray-token-shards' version 1"
    )
    del raw["splits"]
    raw["version"] = 1
    path.write_text(json.dumps(raw))
    with pytest.raises(DatasetError) as info:
        ts.read_manifest(dataset.directory)
    assert str(info.value) == f"dataset {dataset.directory}: manifest.json is malformed (KeyError: 'splits')"
    path.write_text("[1, 2]")
    with pytest.raises(DatasetError) as info:
        ts.read_manifest(dataset.directory)
    assert str(info.value) == (
        f"dataset {dataset.directory}: manifest.json is malformed (AttributeError: 'list' object has no attribute 'get')"
    )


def test_the_manifest_is_replaced_atomically(dataset, monkeypatch):
    """A write that fails midway leaves the old manifest whole and no temp file behind."""
    before = (dataset.directory / "manifest.json").read_bytes()

    def boom(fd):
        raise OSError("disk full")

    monkeypatch.setattr(ts.os, "fsync", boom)
    with pytest.raises(OSError, match="disk full"):
        ts.write_manifest(dataset)
    assert (dataset.directory / "manifest.json").read_bytes() == before
    assert [p.name for p in dataset.directory.iterdir() if p.name.endswith(".tmp")] == []


def test_the_manifest_format_is_the_one_hpray_checks():
    """hpray submit training reads a dataset's manifest (config.pretokenize.TOKEN_SHARDS_FORMAT)
    without the runtime's reader, which imports no config: the two names are one value."""
    from config.pretokenize import TOKEN_SHARDS_FORMAT
    from workloads.common import token_shards

    assert token_shards.FORMAT == TOKEN_SHARDS_FORMAT
