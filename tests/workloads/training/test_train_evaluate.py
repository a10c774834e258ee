"""Evaluation in the train loop (workloads/training/evaluate.py) and the job's data
(workloads/training/data.py open_data, check_dataset): the same held-out windows and the same
value on any world size, and the dataset checks' one-line errors."""

from __future__ import annotations

import math

import pytest
import torch

from workloads.common import token_shards
from workloads.common.model import build, config_from_dict
from workloads.common.tokenizer import ByteTokenizer
from workloads.training import settings as S
from workloads.training.data import ByteWindows, HeldOut, check_dataset, load_corpus, open_data
from workloads.training.evaluate import eval_metrics, eval_sums


def _model():
    torch.manual_seed(0)
    return build(
        config_from_dict(
            {
                "arch": "llama",
                "block_size": 16,
                "n_layer": 1,
                "n_head": 4,
                "n_kv_head": 2,
                "n_embd": 32,
                "ffn_hidden": 64,
            }
        )
    )


@pytest.mark.parametrize("world", [2, 3, 4])
def test_the_evaluation_is_the_same_on_any_world_size(world):
    """13 held-out windows (not a multiple of any batch): the ranks' sums over their shares add
    up to one process's, every window counted once."""
    corpus = ByteWindows(load_corpus(None, 1 << 16), 16, 1, held_out=13)
    held = HeldOut(13, corpus.held_out_windows, 1.0)
    model = _model()
    one = eval_sums(model, held, rank=0, world=1, batch_size=2, device=torch.device("cpu"))
    parts = [
        eval_sums(model, held, rank=r, world=world, batch_size=2, device=torch.device("cpu")) for r in range(world)
    ]
    assert one[1] == sum(p[1] for p in parts) == 13 * 16
    assert math.isclose(one[0], sum(p[0] for p in parts), rel_tol=1e-9)
    m = eval_metrics(*one, 1.0)
    assert m["val_perplexity"] == pytest.approx(math.exp(m["val_loss"]))
    assert m["val_bits_per_byte"] == pytest.approx(m["val_loss"] / math.log(2))
    assert model.training  # left as it was


def test_held_out_windows_are_not_trained_on():
    full = ByteWindows(load_corpus(None, 1 << 16), 16, 1)
    part = ByteWindows(load_corpus(None, 1 << 16), 16, 1, held_out=10)
    assert part.num_windows == full.num_windows - 10
    assert torch.equal(part.held_out_windows([0])[0], full.tokens[part.num_windows * 16 : part.num_windows * 16 + 17])
    with pytest.raises(ValueError, match=r"^training.eval_batches: 4000 held-out windows"):
        ByteWindows(load_corpus(None, 1 << 16), 16, 1, held_out=4000)


@pytest.fixture
def dataset(tmp_path):
    """A byte-token dataset of 2 shards per split, written with the shard writer."""
    import numpy as np

    out = tmp_path / "ds"
    splits = {}
    for split, n in (("train", 5000), ("validation", 4000)):
        w = token_shards.ShardWriter(out, split, np.dtype(np.uint16), n // 2)
        w.append(np.arange(n, dtype=np.uint16) % 256)
        splits[split] = token_shards.SplitInfo(tuple(w.close()), 1)
    m = token_shards.Manifest(
        out,
        np.dtype(np.uint16),
        2500,
        token_shards.TokenizerInfo.of(ByteTokenizer()),
        splits,
        {"split_bytes": {"train": 5000, "validation": 4000}},
    )
    token_shards.write_manifest(m)
    return out


def test_the_dataset_checks_are_one_message(dataset, tmp_path):
    with pytest.raises(ValueError) as err:
        check_dataset(str(dataset), tokenizer="bytes", vocab_size=200)
    assert str(err.value) == (
        f"training.model.vocab_size: 200 rows of the embedding, but dataset {dataset} was tokenized with a "
        "tokenizer of 256 ids; allowed: model.vocab_size 256 or more (or a dataset of a smaller tokenizer)"
    )
    from rigs.bpe import train_bpe

    tok = train_bpe(tmp_path / "tok.json", vocab_size=300)
    with pytest.raises(ValueError, match=r"^dataset .* was tokenized with tokenizer .* not the configured tokenizer"):
        check_dataset(str(dataset), tokenizer=str(tok), vocab_size=1024)
    with pytest.raises(ValueError, match=r"^dataset .*: no manifest.json, so the dataset is not complete"):
        check_dataset(str(tmp_path / "nothing"), tokenizer="bytes", vocab_size=256)
    with open(dataset / "train/shard-00001.bin", "r+b") as f:
        f.truncate(10)
    with pytest.raises(ValueError, match=r"shard train/shard-00001.bin has 10 bytes, the manifest says 5000"):
        check_dataset(str(dataset), tokenizer="bytes", vocab_size=256)


def test_open_data_reads_the_dataset_and_hashes_this_ranks_shards(dataset, tmp_path):
    s = S.for_local(
        {"dataset_path": str(dataset), "eval_every_steps": 5, "eval_batches": 2}, storage_path=str(tmp_path)
    )
    data = open_data(s, rank=0, world=1, block_size=64, vocab_size=256)
    assert data.held_out is not None and data.held_out.count == 2 * 8 * 2
    assert data.held_out.bytes_per_token == 1.0
    assert data.held_out.read([0])[0].tolist() == [i % 256 for i in range(65)]
    with open(dataset / "validation/shard-00001.bin", "r+b") as f:  # same size, other bytes
        f.seek(0)
        f.write(b"\xff\xff")
    with pytest.raises(ValueError, match=r"shard validation/shard-00001.bin has sha256"):
        open_data(s, rank=1, world=2, block_size=64, vocab_size=256)
    open_data(s, rank=0, world=2, block_size=64, vocab_size=256)  # rank 0 hashes the other shards
