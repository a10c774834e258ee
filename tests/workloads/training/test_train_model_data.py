"""The shared GPT module and the resumable byte-level data."""

from __future__ import annotations

import copy

import torch

from workloads.common.model import GPT, GPTConfig, decode, encode, flops_per_token
from workloads.training.data import ByteWindows, DataPosition, load_corpus, stdlib_sources


def test_tokenizer_roundtrip():
    text = "def f(x):\n    return 'héllo' ✓"
    assert decode(encode(text)) == text
    assert max(encode(text)) < 256 and decode([0xFF]) == "\ufffd"


def test_forward_loss_and_generate():
    torch.manual_seed(0)
    cfg = GPTConfig(block_size=16, n_layer=1, n_head=2, n_embd=16)
    model = GPT(cfg)
    x = torch.tensor([encode("hello world, hi")])
    logits, loss = model(x[:, :-1], x[:, 1:])
    assert logits.shape == (1, 14, 256) and abs(loss.item() - torch.log(torch.tensor(256.0)).item()) < 0.5
    out = model.generate(x, max_new_tokens=20, temperature=0)  # longer than block_size: cropped
    assert out.shape == (1, 35) and torch.equal(out[:, :15], x)
    assert GPTConfig.from_dict(cfg.to_dict()) == cfg
    assert flops_per_token(cfg) == 6 * 12 * 16**2 + 12 * 16 * 16


def test_corpus_is_the_stdlib_and_deterministic():
    files = stdlib_sources()
    assert any(p.name == "argparse.py" for p in files)
    assert not any("site-packages" in p.parts for p in files)
    a, b = load_corpus(None, 1 << 18), load_corpus(None, 1 << 18)
    assert a == b and len(a) == 1 << 18


def test_data_position_resumes_exactly():
    data = ByteWindows(load_corpus(None, 1 << 12), block_size=32, seed=3)
    straight = DataPosition()
    batches = [data.next_batch(straight, rank=1, world_size=2, batch_size=4) for _ in range(40)]
    # 127 windows, 8 per step: the walk crosses two epoch boundaries.
    assert straight.epoch == 2
    pos = DataPosition()
    for _ in range(25):
        data.next_batch(pos, rank=1, world_size=2, batch_size=4)
    saved = copy.deepcopy(pos.to_dict())
    fresh = ByteWindows(load_corpus(None, 1 << 12), block_size=32, seed=3)
    resumed = DataPosition(**saved)
    for i in range(25, 40):
        x, y = fresh.next_batch(resumed, rank=1, world_size=2, batch_size=4)
        assert torch.equal(x, batches[i][0]) and torch.equal(y, batches[i][1])
    x, y = batches[0]
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the inputs shifted by one
