"""workloads/common/token_windows.py: the keyed block shuffle is a permutation that differs by
epoch; windows hold the right tokens; a rank reads only its slice; resume is exact on the same
and on another world size."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from tests.workloads.common.test_token_shards import make_dataset
from workloads.common.token_shards import DatasetError, TokenizerInfo
from workloads.common.token_windows import BlockShuffle, FeistelPermutation, TokenWindows
from workloads.training.data import DataPosition

BLOCK = 16
# uint32 ids that are their own position in the split: a window's first token names it.
TOK = TokenizerInfo("huggingface", "12" * 32, 1 << 20, 0, None)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("windows")
    # 3 full shards of 1000 tokens and one of 401: (999 // 16) * 3 + 400 // 16 = 62 * 3 + 25 windows.
    make_dataset(d, np.arange(3401), np.arange(100), shard_tokens=1000, tok=TOK)
    return d


def expected_window(w: int) -> list[int]:
    shard, local = divmod(w, 62) if w < 186 else (3, w - 186)
    start = shard * 1000 + local * BLOCK
    return list(range(start, start + BLOCK + 1))


@pytest.mark.parametrize(("n", "k"), [(1, 1), (2, 8), (7, 3), (64, 8), (1000, 8), (1001, 64), (4097, 1), (5000, 7)])
def test_the_shuffle_is_a_permutation_every_epoch_and_differs_by_epoch(n, k):
    shuffle = BlockShuffle(n, seed=11, block=k)
    orders = [shuffle(e, np.arange(n)) for e in range(3)]
    for order in orders:
        assert sorted(order.tolist()) == list(range(n))
    if n > 8:
        assert orders[0].tolist() != orders[1].tolist() != orders[2].tolist()
        assert BlockShuffle(n, seed=12, block=k)(0, np.arange(n)).tolist() != orders[0].tolist()


def test_the_shuffle_is_a_pure_function_of_seed_epoch_and_position():
    a, b = BlockShuffle(5000, seed=3, block=8), BlockShuffle(5000, seed=3, block=8)
    positions = np.array([4999, 0, 1234, 77])
    b(9, np.arange(100))  # a different history
    assert a(2, positions).tolist() == b(2, positions).tolist() == a(2, np.arange(5000))[positions].tolist()


def test_blocks_keep_adjacent_windows_together():
    order = BlockShuffle(800, seed=1, block=8)(0, np.arange(800))
    assert all(len(set((order[i : i + 8] // 8).tolist())) == 1 for i in range(0, 800, 8))


def test_the_feistel_network_inverts():
    f = FeistelPermutation(12345, key=99)
    x = np.arange(12345)
    assert (f.inverse(f(x)) == x).all() and (f(x) != x).any()


def test_windows_hold_the_corpus_tokens(corpus):
    data = TokenWindows(corpus, block_size=BLOCK, seed=0)
    assert data.num_windows == 211
    windows = np.array([0, 61, 62, 185, 186, 210])
    assert data.read(windows).tolist() == [expected_window(int(w)) for w in windows]
    inputs, targets = data.batch(0, 0, 0, 1, 8)
    assert inputs.dtype == targets.dtype == torch.int64 and inputs.shape == (8, BLOCK)
    assert torch.equal(inputs[:, 1:], targets[:, :-1])
    order = data.shuffle(0, np.arange(8))
    assert inputs[:, 0].tolist() == [expected_window(int(w))[0] for w in order]


def global_batch(data: TokenWindows, epoch: int, cursor: int, world: int, per_rank: int) -> torch.Tensor:
    return torch.cat([data.batch(epoch, cursor, r, world, per_rank)[0] for r in range(world)])


def test_the_global_batch_is_the_same_on_any_world_size(corpus):
    data = TokenWindows(corpus, block_size=BLOCK, seed=5)
    fresh = TokenWindows(corpus, block_size=BLOCK, seed=5)
    one = global_batch(data, 2, 24, 1, 12)
    for world, per_rank in [(2, 6), (3, 4), (4, 3), (12, 1)]:
        assert torch.equal(global_batch(fresh, 2, 24, world, per_rank), one)
    assert not torch.equal(global_batch(data, 3, 24, 1, 12), one)
    assert not torch.equal(TokenWindows(corpus, block_size=BLOCK, seed=6).batch(2, 24, 0, 1, 12)[0], one)


def run_steps(data: TokenWindows, pos: DataPosition, steps: int, world: int, per_rank: int) -> list[torch.Tensor]:
    out = []
    for _ in range(steps):
        ranks = []
        for r in range(world):
            p = dataclasses.replace(pos)
            ranks.append(data.next_batch(p, rank=r, world_size=world, batch_size=per_rank)[0])
        pos.epoch, pos.cursor = p.epoch, p.cursor
        out.append(torch.cat(ranks))
    return out


def test_resume_is_exact_across_epochs_on_the_same_and_another_world_size(corpus):
    # 211 windows, global batch 24: 8 steps an epoch (19 windows of each epoch skipped).
    whole = run_steps(TokenWindows(corpus, block_size=BLOCK, seed=1), DataPosition(), 20, 4, 6)
    pos = DataPosition()
    run_steps(TokenWindows(corpus, block_size=BLOCK, seed=1), pos, 7, 4, 6)
    assert pos.to_dict() == {"epoch": 0, "cursor": 168}
    saved = pos.to_dict()
    for world, per_rank in [(4, 6), (2, 12), (3, 8)]:
        resumed = run_steps(TokenWindows(corpus, block_size=BLOCK, seed=1), DataPosition(**saved), 13, world, per_rank)
        assert all(torch.equal(a, b) for a, b in zip(resumed, whole[7:], strict=True))
    seen = torch.cat(whole[:8])[:, 0]
    assert len(set(seen.tolist())) == 192  # no window twice within an epoch


def test_a_rank_reads_only_its_slice(corpus, monkeypatch):
    data = TokenWindows(corpus, block_size=BLOCK, seed=0)
    asked: list[int] = []
    real = data.read
    monkeypatch.setattr(data, "read", lambda w: (asked.extend(w.tolist()), real(w))[1])
    data.batch(0, 48, 3, 4, 5)
    assert asked == data.shuffle(0, np.arange(48 + 15, 48 + 20)).tolist()


def test_bad_positions_are_one_message(corpus):
    data = TokenWindows(corpus, block_size=BLOCK, seed=0)
    with pytest.raises(DatasetError) as info:
        data.batch(0, 200, 0, 2, 8)
    assert str(info.value) == (
        "cursor 200: a global batch of 16 windows must lie within the 211 windows of split 'train'; allowed: 0 to 195"
    )
    with pytest.raises(DatasetError) as info:
        data.batch(0, 0, 2, 2, 8)
    assert str(info.value) == "rank 2: allowed 0 to world_size - 1 = 1"
    with pytest.raises(DatasetError) as info:
        data.next_batch(DataPosition(), rank=0, world_size=32, batch_size=8)
    assert str(info.value) == "global batch 256 exceeds the 211 windows of the corpus"


def test_a_split_without_a_window_and_an_unknown_split(corpus):
    with pytest.raises(DatasetError) as info:
        TokenWindows(corpus, block_size=100, seed=0, split="validation")
    assert str(info.value) == (
        f"dataset {corpus}: split 'validation' has 100 tokens, no window of 101; "
        "allowed: a split with at least 101 tokens in one shard"
    )
    with pytest.raises(DatasetError) as info:
        TokenWindows(corpus, block_size=BLOCK, seed=0, split="test")
    assert str(info.value) == f"dataset {corpus}: no split 'test'; allowed: train, validation"
    assert TokenWindows(corpus, block_size=BLOCK, seed=0, split="validation").num_windows == 6


def test_opening_checks_the_tokenizer_and_hashes_the_shards_given(corpus):
    with pytest.raises(DatasetError, match="was tokenized with tokenizer 1212121212121212"):
        TokenWindows(corpus, block_size=BLOCK, seed=0, tokenizer_fingerprint="00" * 32)
    TokenWindows(
        corpus, block_size=BLOCK, seed=0, tokenizer_fingerprint=TOK.fingerprint, verify_shards=["train/shard-00000.bin"]
    )


def test_eval_batches_read_the_windows_in_order_split_over_ranks(corpus):
    data = TokenWindows(corpus, block_size=BLOCK, seed=0)
    per_rank = [list(data.eval_batches(r, 3, 5)) for r in range(3)]
    assert [len(b) for b in per_rank] == [14, 14, 14]  # 211 // 15
    firsts = [int(x) for step in range(14) for r in range(3) for x in per_rank[r][step][0][:, 0]]
    assert firsts == [expected_window(w)[0] for w in range(210)]
    assert len(list(data.eval_batches(0, 3, 5, max_batches=2))) == 2
