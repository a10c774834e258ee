"""Batched text generation with the training job's models (the Llama, and the small GPT); loading
them is ``workloads.inference.loading``.

Plain PyTorch, no Ray: the Serve replica, the FastAPI baselines in ``bench/`` and the tests all
call the same code. A batch holds sequences of different lengths, right-padded: with causal
attention a token never sees the padding after it, so each row's logits are those of the row
alone. The prompt batch runs once and fills a key/value cache (the Llama's keys are cached after
their rotary embedding, at their own positions); each further step feeds only the newest token of
every row (recomputing the whole sequence instead: ~10x slower at 256 new tokens after a
128-token prompt, bench/serving_model.py). The math and the sampling are those of ``generate`` (same cropping
past the context, scaling, softmax and ``torch.multinomial`` with the request's own seeded
generator), so a request's tokens equal what calling the model directly gives
(tests/workloads/inference/test_inference_schema.py compares them token for token).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import cast

import torch
from torch.nn import functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from workloads.common.model import (
    GPT,
    Block,
    CausalSelfAttention,
    GroupedQueryAttention,
    Llama,
    LlamaBlock,
    LlamaConfig,
    rotate,
)

log = logging.getLogger("workloads.inference")


@dataclass
class GenRequest:
    """One generation: prompt token ids, how many tokens to add, sampling settings."""

    prompt_ids: list[int]
    max_tokens: int
    temperature: float = 1.0
    seed: int | None = None
    top_p: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    logprobs: int | None = None  # record the sampled token's log-probability and this many alternatives
    _generator: torch.Generator | None = field(default=None, repr=False)
    # Filled while generating when ``logprobs`` is set: per generated token, the model's
    # log-probability of it and of the ``logprobs`` most likely tokens.
    token_logprobs: list[float] = field(default_factory=list, repr=False)
    top_logprobs: list[dict[int, float]] = field(default_factory=list, repr=False)

    def generator(self) -> torch.Generator:
        if self._generator is None:
            self._generator = torch.Generator()
            if self.seed is None:
                self._generator.seed()
            else:
                self._generator.manual_seed(self.seed)
        return self._generator


class _KVCache:
    """Keys and values of every layer for a batch of right-padded rows, ``(rows, heads, time, head
    width)`` per layer, allocated once for the longest row the batch can reach."""

    def __init__(self, n_layer: int, rows: int, heads: int, length: int, width: int, like: torch.Tensor):
        shape = (rows, heads, length, width)
        self.k = [torch.zeros(shape, dtype=like.dtype, device=like.device) for _ in range(n_layer)]
        self.v = [torch.zeros(shape, dtype=like.dtype, device=like.device) for _ in range(n_layer)]

    def keep(self, rows: torch.Tensor) -> None:
        self.k = [k[rows] for k in self.k]
        self.v = [v[rows] for v in self.v]


def _attend(
    attn: CausalSelfAttention,
    x: torch.Tensor,
    cache: _KVCache,
    layer: int,
    pos: torch.Tensor | None,
    mask: torch.Tensor | None,
    span: int,
) -> torch.Tensor:
    """``CausalSelfAttention.forward`` with cached keys and values.

    Prefill (``pos`` None): ``x`` is the whole right-padded prompt batch, causal attention, and
    its keys/values fill the cache from position 0. Decode: ``x`` is one new token per row at
    position ``pos[row]``; its key/value go into the cache there and it attends to the first
    ``span`` cached positions (``mask`` hides each row's positions past its own).
    """
    b, t, c = x.shape
    h = attn.n_head
    q, k, v = attn.qkv(x).split(c, dim=2)
    q, k, v = (z.view(b, t, h, c // h).transpose(1, 2) for z in (q, k, v))
    out: torch.Tensor = attn.proj(
        _cached_attention(q, k, v, cache, layer, pos, mask, span).transpose(1, 2).reshape(b, t, c)
    )
    return out


def _cached_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cache: _KVCache,
    layer: int,
    pos: torch.Tensor | None,
    mask: torch.Tensor | None,
    span: int,
) -> torch.Tensor:
    """Attention of ``q`` (rows, heads, time, width) over the cache after storing ``k``/``v``
    (rows, key/value heads, time, width) in it; grouped when there are fewer key/value heads."""
    gqa = k.shape[1] != q.shape[1]
    if pos is None:
        t = q.shape[2]
        cache.k[layer][:, :, :t] = k
        cache.v[layer][:, :, :t] = v
        prefill: torch.Tensor = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        return prefill
    rows = torch.arange(q.shape[0], device=q.device)
    cache.k[layer][rows, :, pos] = k[:, :, 0]
    cache.v[layer][rows, :, pos] = v[:, :, 0]
    keys, values = cache.k[layer][:, :, :span], cache.v[layer][:, :, :span]
    decode: torch.Tensor = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=gqa)
    return decode


def _attend_llama(
    attn: GroupedQueryAttention,
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    cache: _KVCache,
    layer: int,
    pos: torch.Tensor | None,
    mask: torch.Tensor | None,
    span: int,
) -> torch.Tensor:
    """``GroupedQueryAttention.forward`` with cached keys and values (rotated at their own
    positions before they are cached); prefill and decode as in ``_attend``."""
    b, t, _ = x.shape
    q = attn.wq(x).view(b, t, attn.n_head, attn.head_dim).transpose(1, 2)
    k = attn.wk(x).view(b, t, attn.n_kv_head, attn.head_dim).transpose(1, 2)
    v = attn.wv(x).view(b, t, attn.n_kv_head, attn.head_dim).transpose(1, 2)
    q, k = rotate(q, cos, sin), rotate(k, cos, sin)
    out: torch.Tensor = attn.wo(
        _cached_attention(q, k, v, cache, layer, pos, mask, span).transpose(1, 2).reshape(b, t, -1)
    )
    return out


# Attention backends of the cached forward. Not cuDNN's: it builds an execution plan for each new
# key length, which at one new token per step costs more than the attention (docs/benchmarks.md).
CACHED_ATTENTION_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def _forward_cached(
    model: GPT | Llama,
    x: torch.Tensor,
    cache: _KVCache,
    pos: torch.Tensor | None,
    mask: torch.Tensor | None,
    span: int,
) -> torch.Tensor:
    """The model's ``forward`` (eval mode) through the cache; hidden states before the final norm."""
    with sdpa_kernel(CACHED_ATTENTION_BACKENDS):
        return _layers_cached(model, x, cache, pos, mask, span)


def _layers_cached(
    model: GPT | Llama,
    x: torch.Tensor,
    cache: _KVCache,
    pos: torch.Tensor | None,
    mask: torch.Tensor | None,
    span: int,
) -> torch.Tensor:
    if isinstance(model, Llama):
        if pos is None:
            cos, sin = model.rope_cos[: x.shape[1]], model.rope_sin[: x.shape[1]]
        else:  # one position per row: (rows, 1, 1, width / 2) against (rows, heads, 1, width / 2)
            cos, sin = model.rope_cos[pos][:, None, None], model.rope_sin[pos][:, None, None]
        z: torch.Tensor = model.tok_emb(x)
        # nn.ModuleList iterates as nn.Module in torch's annotations; these are the model's blocks.
        for layer, block in enumerate(cast(Iterable[LlamaBlock], model.layers)):
            z = z + _attend_llama(block.attn, block.attn_norm(z), cos, sin, cache, layer, pos, mask, span)
            z = z + block.mlp(block.mlp_norm(z))
        return z
    positions = torch.arange(x.shape[1], device=x.device) if pos is None else pos.unsqueeze(1)
    z = model.tok_emb(x) + model.pos_emb(positions)
    for layer, gpt_block in enumerate(cast(Iterable[Block], model.blocks)):
        z = z + _attend(gpt_block.attn, gpt_block.ln1(z), cache, layer, pos, mask, span)
        z = z + gpt_block.mlp(gpt_block.ln2(z))
    return z


def _logits(model: GPT | Llama, z: torch.Tensor) -> torch.Tensor:
    """The model's final norm and output head over hidden states."""
    logits: torch.Tensor = model.head(model.norm(z) if isinstance(model, Llama) else model.ln_f(z))
    return logits


def _new_cache(model: GPT | Llama, rows: int, length: int) -> _KVCache:
    cfg = model.config
    heads = cfg.n_kv_head if isinstance(cfg, LlamaConfig) else cfg.n_head
    return _KVCache(cfg.n_layer, rows, heads, length, cfg.n_embd // cfg.n_head, next(model.parameters()))


def _adjust(logits: torch.Tensor, req: GenRequest, generated: list[int]) -> torch.Tensor:
    """OpenAI's logit adjustments: ``logit_bias``, then the frequency and presence penalties
    over the tokens generated so far (``logit - count * frequency - (count > 0) * presence``)."""
    if not (req.logit_bias or req.frequency_penalty or req.presence_penalty):
        return logits
    logits = logits.clone()
    for tok, bias in req.logit_bias:
        logits[0, tok] += bias
    if generated and (req.frequency_penalty or req.presence_penalty):
        counts = torch.bincount(torch.tensor(generated), minlength=logits.shape[-1]).to(logits.dtype)
        logits[0] -= counts * req.frequency_penalty + (counts > 0).to(logits.dtype) * req.presence_penalty
    return logits


def _top_p(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus sampling: keep the most likely tokens until their mass reaches ``top_p``."""
    ordered, order = probs.sort(dim=-1, descending=True)
    before = ordered.cumsum(dim=-1) - ordered  # mass of the more likely tokens
    ordered = ordered.masked_fill(before >= top_p, 0.0)
    ordered[..., 0] = ordered[..., 0].clamp_min(1e-30)  # the most likely token always stays
    return torch.zeros_like(probs).scatter(-1, order, ordered)


def _sample(logits: torch.Tensor, requests: list[GenRequest], active: list[int], seqs: list[list[int]]) -> list[int]:
    """One token per row of ``logits`` (rows, vocab), as ``GPT.generate`` samples: greedy at
    temperature 0, else softmax and ``torch.multinomial`` with the request's own generator.
    With OpenAI's default settings (no bias, no penalty, top_p 1) nothing else touches the logits."""
    out = []
    for row, i in enumerate(active):
        req = requests[i]
        last = logits[row : row + 1]
        adjusted = _adjust(last, req, seqs[i][len(req.prompt_ids) :])
        if req.temperature == 0:
            tok = int(adjusted.argmax(dim=-1))
        else:
            probs = F.softmax(adjusted / req.temperature, dim=-1)
            if req.top_p < 1.0:
                probs = _top_p(probs, req.top_p)
            tok = int(torch.multinomial(probs, num_samples=1, generator=req.generator()))
        if req.logprobs is not None:
            lp = F.log_softmax(last[0].float(), dim=-1)
            req.token_logprobs.append(float(lp[tok]))
            top = lp.topk(req.logprobs) if req.logprobs else None
            req.top_logprobs.append(
                {} if top is None else {int(t): float(v) for v, t in zip(top.values, top.indices, strict=True)}
            )
        out.append(tok)
    return out


@torch.inference_mode()
def prompt_logprobs(
    model: GPT | Llama, prompt_ids: list[int], k: int
) -> tuple[list[float | None], list[dict[int, float] | None]]:
    """Log-probabilities of each prompt token given the ones before it (``echo`` with
    ``logprobs``); the first token has none, as in OpenAI's API."""
    device = next(model.parameters()).device
    logits, _ = model(torch.tensor([prompt_ids], dtype=torch.long, device=device))
    lp = F.log_softmax(logits[0].float().cpu(), dim=-1)
    chosen: list[float | None] = [None]
    tops: list[dict[int, float] | None] = [None]
    for pos in range(1, len(prompt_ids)):
        chosen.append(float(lp[pos - 1, prompt_ids[pos]]))
        top = lp[pos - 1].topk(k) if k else None
        tops.append({} if top is None else {int(t): float(v) for v, t in zip(top.values, top.indices, strict=True)})
    return chosen, tops


@torch.inference_mode()
def stream_batch(
    model: GPT | Llama, requests: list[GenRequest], use_cache: bool = True
) -> Iterator[list[tuple[int, int]]]:
    """Generate for every request at once; yield, per step, ``[(request index, token id)]``.

    Requests drop out of the batch when they have their ``max_tokens``. The prompt batch runs
    once (prefill) and fills a key/value cache; every later step runs only the one new token per
    row against it. Once a row outgrows the context, positions shift with every token (the
    context is cropped to ``block_size`` like ``GPT.generate`` does), so the remaining steps
    recompute the cropped context in full. ``use_cache=False`` recomputes the whole context at
    every step (the reference the cache is measured and tested against).
    """
    block = model.config.block_size
    device = next(model.parameters()).device
    seqs = [list(r.prompt_ids) for r in requests]
    left = [r.max_tokens for r in requests]
    active = [i for i, n in enumerate(left) if n > 0]
    if not active:
        return
    lens = [len(seqs[i]) for i in active]
    # The cache is valid while every row fits in the context (absolute positions unchanged).
    reach = min(block, max(len(seqs[i]) + left[i] - 1 for i in active))
    cache = None
    if max(lens) <= block and use_cache:
        cache = _new_cache(model, len(active), reach)
        x = torch.zeros((len(active), max(lens)), dtype=torch.long)
        for row, i in enumerate(active):
            x[row, : lens[row]] = torch.tensor(seqs[i], dtype=torch.long)
        z = _forward_cached(model, x.to(device), cache, None, None, 0)
        last = z[torch.arange(len(active), device=device), torch.tensor(lens, device=device) - 1]
    while True:
        if cache is None:  # full forward over the (cropped) contexts
            ctx = [seqs[i][-block:] for i in active]
            lens = [len(c) for c in ctx]
            x = torch.zeros((len(active), max(lens)), dtype=torch.long)
            for row, c in enumerate(ctx):
                x[row, : len(c)] = torch.tensor(c, dtype=torch.long)
            logits, _ = model(x.to(device))
            logits = logits[torch.arange(len(active), device=device), torch.tensor(lens, device=device) - 1]
        else:
            logits = _logits(model, last)
        # Sampling on the CPU with each request's own seeded generator (as GPT.generate locally).
        logits = logits.float().cpu() if logits.device.type != "cpu" else logits
        toks = _sample(logits, requests, active, seqs)
        out: list[tuple[int, int]] = []
        for i, nxt in zip(active, toks, strict=True):
            seqs[i].append(nxt)
            left[i] -= 1
            out.append((i, nxt))
        yield out
        still = [row for row, i in enumerate(active) if left[i] > 0]
        if not still:
            return
        if len(still) < len(active):
            if cache is not None:
                cache.keep(torch.tensor(still, device=device))
            active = [active[row] for row in still]
            toks = [toks[row] for row in still]
        if cache is not None and max(len(seqs[i]) for i in active) > reach:
            cache = None  # a row outgrew the context: positions shift from here on
        if cache is not None:
            pos = torch.tensor([len(seqs[i]) - 1 for i in active], device=device)
            span = int(pos.max()) + 1
            mask = None
            if len(active) > 1 and int(pos.min()) + 1 < span:
                mask = (torch.arange(span, device=device).unsqueeze(0) <= pos.unsqueeze(1))[:, None, None, :]
            x = torch.tensor(toks, dtype=torch.long, device=device).unsqueeze(1)
            last = _forward_cached(model, x, cache, pos, mask, span)[:, 0]


def generate_batch(model: GPT | Llama, requests: list[GenRequest], use_cache: bool = True) -> list[list[int]]:
    """The generated token ids of every request (prompt excluded)."""
    result: list[list[int]] = [[] for _ in requests]
    for step in stream_batch(model, requests, use_cache):
        for i, tok in step:
            result[i].append(tok)
    return result


def health_probe(model: GPT | Llama) -> None:
    """Raise unless the model really answers: finite logits and a valid greedy token."""
    with torch.no_grad():
        device = next(model.parameters()).device
        logits, _ = model(torch.tensor([[72, 105]], dtype=torch.long, device=device))
    if not bool(torch.isfinite(logits).all()):
        raise RuntimeError("model produced non-finite logits")
    tok = int(logits[0, -1].argmax())
    if not 0 <= tok < model.config.vocab_size or math.isnan(float(logits[0, -1, tok])):
        raise RuntimeError(f"model produced an invalid token {tok}")
