"""The shared models (Llama-style decoder, presets, the small GPT) and the resumable byte-level data."""

from __future__ import annotations

import copy
import os
import sysconfig
from pathlib import Path

import pytest
import torch

from config.training import PRESETS, ModelSize
from workloads.common.model import (
    GPT,
    GPTConfig,
    Llama,
    LlamaConfig,
    config_from_dict,
    count_parameters,
    decode,
    encode,
    flops_per_token,
)
from workloads.training import data as data_mod
from workloads.training.data import _SKIP_PARTS, ByteWindows, DataPosition, load_corpus, stdlib_sources


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
    assert flops_per_token(cfg) == 6 * (12 * 16**2 + 16 * 256) + 12 * 16 * 16  # the output layer: 16 x 256


def test_corpus_is_the_stdlib_and_deterministic():
    files = stdlib_sources()
    assert any(p.name == "argparse.py" for p in files)
    assert not any("site-packages" in p.parts for p in files)
    a, b = load_corpus(None, 1 << 18), load_corpus(None, 1 << 18)
    assert a == b and len(a) == 1 << 18


def _rglob_reference(root: Path) -> list[Path]:
    """What the corpus is: every .py file under ``root`` outside the skipped directories, sorted."""
    return sorted(p for p in root.rglob("*.py") if not _SKIP_PARTS.intersection(p.relative_to(root).parts))


def test_corpus_walk_lists_the_same_files_in_the_same_order(tmp_path, monkeypatch):
    """The walk every worker does at start skips the excluded directories without listing them
    (the stdlib directory also holds the interpreter's site-packages, tens of thousands of
    files); the corpus stays the same bytes: the same files, in the order of sorted paths
    ("a/z.py" before "a-b/a.py")."""
    names = ["a/z.py", "a-b/a.py", "a.py", "b/tests/x.py", "b/site-packages/p/q.py", "b/c/__pycache__/d.py"]
    names += ["b/c/e.py", "b/c/e.txt", "test/t.py", "z/.hidden.py"]
    for rel in names:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel * 100)
    (tmp_path / "link").symlink_to(tmp_path / "b" / "c")  # rglob does not enter symlinked directories
    expected = _rglob_reference(tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in expected] == [
        "a/z.py",
        "a-b/a.py",
        "a.py",
        "b/c/e.py",
        "z/.hidden.py",
    ]
    monkeypatch.setattr(data_mod.sysconfig, "get_paths", lambda: {"stdlib": str(tmp_path)})
    listed: list[str] = []
    scandir = os.scandir
    monkeypatch.setattr(os, "scandir", lambda path=".": (listed.append(os.fspath(path)), scandir(path))[1])
    assert stdlib_sources() == expected
    assert load_corpus(None, 2000) == b"".join(p.read_bytes() for p in expected)[:2000]
    entered = {Path(d).relative_to(tmp_path).as_posix() for d in listed}
    assert entered == {".", "a", "a-b", "b", "b/c", "z"}  # never site-packages, tests, __pycache__, link
    monkeypatch.undo()
    assert stdlib_sources() == _rglob_reference(Path(sysconfig.get_paths()["stdlib"]))


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


@pytest.mark.parametrize("name", list(PRESETS))
def test_preset_parameter_count_is_the_stated_one(name):
    """Each preset's stated count equals the model built on the meta device, and the config's
    own arithmetic (used by the memory check) agrees."""
    size = ModelSize(preset=name)
    assert count_parameters(config_from_dict(size.architecture())) == PRESETS[name]["params"]
    assert size.parameters() == PRESETS[name]["params"]


def test_largest_preset_is_at_least_8b():
    assert max(p["params"] for p in PRESETS.values()) >= 8e9


def test_gpt_stays_as_a_small_architecture():
    size = ModelSize(arch="gpt", n_layer=2, n_head=2, n_embd=32, block_size=32)
    assert count_parameters(config_from_dict(size.architecture())) == size.parameters()


def test_llama_forward_generate_and_gqa():
    torch.manual_seed(0)
    cfg = LlamaConfig(block_size=16, n_layer=1, n_head=4, n_kv_head=2, n_embd=32, ffn_hidden=64)
    model = Llama(cfg)
    assert model.layers[0].attn.wk.weight.shape == (16, 32)  # 2 key/value heads of 8
    x = torch.tensor([encode("hello world, hi")])
    logits, loss = model(x[:, :-1], x[:, 1:])
    assert logits.shape == (1, 14, 256) and abs(loss.item() - torch.log(torch.tensor(256.0)).item()) < 0.5
    out = model.generate(x, max_new_tokens=20, temperature=0)
    assert out.shape == (1, 35) and torch.equal(out[:, :15], x)
    assert config_from_dict(cfg.to_dict()) == cfg
    # Rotary positions: a causal model's output at a position depends only on the prefix.
    logits_short, _ = model(x[:, :5])
    assert torch.allclose(logits_short, logits[:, :5], atol=1e-5)


def test_activation_checkpointing_gives_the_same_gradients():
    cfg = LlamaConfig()
    grads = []
    for recompute in (False, True):
        torch.manual_seed(0)
        model = Llama(cfg)
        model.activation_checkpointing = recompute
        x = torch.randint(0, 256, (2, 32))
        model(x, x)[1].backward()
        grads.append(model.layers[0].mlp.w_up.weight.grad)
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


@pytest.mark.parametrize("arch", ["gpt", "llama"])
def test_the_chunked_loss_is_the_full_cross_entropy(arch):
    """The models' loss (chunked: no fp32 copy of every logit) equals F.cross_entropy over the
    logits, in value and gradients, within float tolerance; logits=False returns no logits."""
    import torch.nn.functional as F

    from workloads.common.model import build

    torch.manual_seed(0)
    fields = {"arch": arch, "block_size": 16, "n_layer": 1, "n_head": 4, "n_embd": 32, "vocab_size": 300}
    if arch == "llama":
        fields.update(n_kv_head=2, ffn_hidden=64)
    model = build(config_from_dict(fields))
    x = torch.randint(0, 300, (3, 16))
    y = torch.randint(0, 300, (3, 16))
    logits, loss = model(x, y)
    want = F.cross_entropy(logits.float().reshape(-1, 300), y.reshape(-1))
    assert torch.allclose(loss, want, rtol=1e-6, atol=1e-6)
    g_want = torch.autograd.grad(want, list(model.parameters()))
    none, loss2 = model(x, y, logits=False)
    assert none is None and torch.equal(loss2, loss)
    g_got = torch.autograd.grad(loss2, list(model.parameters()))
    for a, b in zip(g_got, g_want, strict=True):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)
