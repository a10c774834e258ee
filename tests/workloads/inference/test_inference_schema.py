"""workloads/inference/schema.py and engine.py without Ray: messages, batching equivalence."""

from __future__ import annotations

import json

import pytest

from workloads.inference import schema

LIMITS = schema.Limits(block_size=64, max_tokens_limit=256, default_max_tokens=16)


def test_defaults():
    c = schema.validate({"prompt": "hi"}, LIMITS)
    assert (c.max_tokens, c.temperature, c.seed, c.stream, c.prompt_ids) == (16, 1.0, None, False, [104, 105])


def test_body_too_large_is_413():
    with pytest.raises(schema.RequestError) as info:
        schema.parse_body(b" " * (schema.MAX_BODY_BYTES + 1))
    assert info.value.status == 413


def test_bool_is_not_an_int():
    with pytest.raises(schema.RequestError) as info:
        schema.validate({"prompt": "hi", "max_tokens": True}, LIMITS)
    assert info.value.param == "max_tokens"


def test_multibyte_prompt_counts_bytes():
    with pytest.raises(schema.RequestError) as info:
        schema.validate({"prompt": "é" * 33}, LIMITS)  # 66 UTF-8 bytes
    assert info.value.message.startswith("prompt: 66 tokens")


def test_stream_text_concatenates_to_the_full_text():
    req = schema.validate({"prompt": "x"}, LIMITS)
    toks = list("héllo ✓".encode())
    enc = schema.StreamEncoder("m", req)
    events = b"".join(enc.token(t) for t in toks) + enc.finish()
    chunks = [json.loads(e[6:]) for e in events.split(b"\n\n") if e.startswith(b"data: {")]
    assert "".join(c["choices"][0]["text"] for c in chunks) == schema.response("m", req, toks)["choices"][0]["text"]


def test_batched_generation_equals_one_at_a_time():
    import torch

    from workloads.common.model import GPT, GPTConfig, encode
    from workloads.inference.engine import GenRequest, generate_batch

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = GPT(GPTConfig(block_size=32, n_layer=2, n_head=2, n_embd=32)).eval()
    prompts = ["a", "hello there", "x" * 30]  # the last one slides past the context
    reqs = [GenRequest(encode(p), 8, 0.7, seed=i) for i, p in enumerate(prompts)]
    together = generate_batch(model, reqs)
    for i, p in enumerate(prompts):
        alone = generate_batch(model, [GenRequest(encode(p), 8, 0.7, seed=i)])[0]
        direct = model.generate(
            torch.tensor([encode(p)]), 8, temperature=0.7, generator=torch.Generator().manual_seed(i)
        )[0, len(encode(p)) :].tolist()
        assert alone == direct
        assert together[i] == alone


def test_llama_greedy_outputs_are_identical_with_and_without_the_cache():
    """The training job's Llama (grouped-query attention, rotary positions) through the key/value
    cache: the prompt runs once, then one token per row, and the tokens equal those of
    recomputing the whole context at every step (fp32, CPU), batched or alone."""
    import torch

    from workloads.common.model import Llama, LlamaConfig, encode
    from workloads.inference.engine import GenRequest, generate_batch

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = Llama(LlamaConfig(block_size=48, n_layer=2, n_head=4, n_kv_head=2, n_embd=64)).eval()
    full_passes = []
    model.register_forward_hook(lambda *_: full_passes.append(1))
    prompts = ["a", "hello there", "x" * 30, "y" * 40]  # the last one slides past the context

    def run(use_cache, temperature=0.0, together=True):
        reqs = [GenRequest(encode(p), 16, temperature, seed=i) for i, p in enumerate(prompts)]
        if together:
            return generate_batch(model, reqs, use_cache)
        return [generate_batch(model, [r], use_cache)[0] for r in reqs]

    cached = run(True)
    assert cached == run(False) == run(True, together=False)
    for p, out in zip(prompts, cached, strict=True):
        direct = model.generate(torch.tensor([encode(p)]), 16, temperature=0)[0, len(encode(p)) :].tolist()
        assert out == direct
    assert run(True, temperature=0.8) == run(False, temperature=0.8)
    full_passes.clear()
    generate_batch(model, [GenRequest(encode(p), 8, 0.0) for p in prompts[:3]])
    assert full_passes == []  # every step ran through the cache


def test_the_cached_forward_leaves_cudnn_attention_out(monkeypatch):
    """cuDNN's attention builds an execution plan for each new key length: one per generated token
    through the cache (2.5 ms a call on an H200, docs/benchmarks.md). Every attention call of a
    cached generation runs with it switched off; the full forward keeps the default backends."""
    import torch

    from workloads.common.model import Llama, LlamaConfig, encode
    from workloads.inference import engine

    sdpa = engine.F.scaled_dot_product_attention
    seen = []

    def recording(*args, **kwargs):
        seen.append(torch.backends.cuda.cudnn_sdp_enabled())
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(engine.F, "scaled_dot_product_attention", recording)
    torch.manual_seed(0)
    model = Llama(LlamaConfig(block_size=32, n_layer=2, n_head=4, n_kv_head=2, n_embd=64)).eval()
    engine.generate_batch(model, [engine.GenRequest(encode("abc"), 4, 0.0)])
    assert seen and not any(seen)
    assert torch.backends.cuda.cudnn_sdp_enabled()  # restored after the generation


def test_torn_newest_checkpoint_is_skipped_and_logged(tmp_path, make_checkpoint, caplog):
    import logging
    import shutil

    from workloads.inference.loading import load_model

    make_checkpoint(tmp_path, 10, seed=1)
    newest = make_checkpoint(tmp_path, 20, seed=2)
    (newest / "manifest.json").unlink()  # torn: the manifest is written last
    with caplog.at_level(logging.WARNING, logger="workloads.inference"):
        loaded = load_model(str(tmp_path), "tiny-run")
    assert loaded.step == 10
    assert "checkpoint_000000020" in loaded.skipped[0] and "no manifest.json" in loaded.skipped[0]
    assert any("newest checkpoint is torn, serving the previous one instead" in r.message for r in caplog.records)
    shutil.rmtree(tmp_path / "tiny-run" / "checkpoint_000000010")
    with pytest.raises(Exception) as info:
        load_model(str(tmp_path), "tiny-run")
    assert "none of the 1 checkpoints of run 'tiny-run'" in str(info.value)


def test_admission_gate_holds_requests_while_a_batch_generates(tmp_path, make_checkpoint):
    """Requests wait at the gate while any batch (plain or streaming) generates and all pass
    together when the last one ends (app.py explains why: Serve's batch loop would otherwise cut
    a batch per wait window)."""
    import asyncio

    from workloads.inference.app import Generate

    make_checkpoint(tmp_path, 10, seed=1)

    async def go():
        gen = Generate(str(tmp_path), "tiny-run")
        await asyncio.wait_for(asyncio.gather(*(gen._admit() for _ in range(3))), 10)  # idle: passes
        gen._busy(True)
        gen._busy(True)  # a streaming batch and a plain one at once
        waiting = [asyncio.create_task(gen._admit()) for _ in range(3)]
        await asyncio.sleep(0.05)
        assert not any(t.done() for t in waiting)
        gen._busy(False)
        await asyncio.sleep(0.05)
        assert not any(t.done() for t in waiting)  # one batch still generates
        gen._busy(False)
        await asyncio.wait_for(asyncio.gather(*waiting), 10)

    asyncio.run(go())
