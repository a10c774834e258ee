"""Batched text generation with the training job's GPT, and loading it from a checkpoint.

Plain PyTorch, no Ray: the Serve replica, the FastAPI baselines in ``bench/`` and the tests all
call the same code. A batch holds sequences of different lengths, right-padded: with causal
attention a token never sees the padding after it, so each row's logits are those of the row
alone. The prompt batch runs once and fills a key/value cache; each further step feeds only the
newest token of every row (without the cache every step re-ran the whole sequence: ~5x the CPU
at a batch of 32 here). The math and the sampling are those of ``GPT.generate`` (same cropping
past the context, scaling, softmax and ``torch.multinomial`` with the request's own seeded
generator), so a request's tokens equal what calling the model directly gives
(tests/workloads/inference/test_inference_schema.py compares them token for token).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch.nn import functional as F

from workloads.common import checkpoint as ckpt
from workloads.common.model import GPT, GPTConfig, LlamaConfig, build, config_from_dict

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


@dataclass
class LoadedModel:
    model: GPT
    run_name: str
    step: int
    path: str
    skipped: list[str]  # newer checkpoints that were torn and skipped

    @property
    def model_id(self) -> str:
        return f"{self.run_name}@step-{self.step}"


def model_config_of(meta: dict) -> GPTConfig | LlamaConfig:
    """The architecture stored in a checkpoint's meta.json."""
    if isinstance(meta.get("model_config"), dict):  # written by workloads.training.job
        return config_from_dict(meta["model_config"])
    raise ckpt.CheckpointError(
        f"checkpoint meta.json holds no model config (looked for model_config); keys: {sorted(meta)}"
    )


def default_device() -> str:
    """The replica's GPU when Ray gave it one (CUDA_VISIBLE_DEVICES), else the CPU."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def load_model(storage: str, run_name: str, device: str | None = None) -> LoadedModel:
    """Load the newest intact checkpoint of ``run_name`` (torn newer ones are skipped and named)."""
    found = ckpt.list_checkpoints(storage, run_name)
    if not found:
        raise ckpt.CheckpointError(
            f"run {run_name!r} has no checkpoints under {storage}; run the training job "
            "(make rehearse-train locally) first"
        )
    # The training workload's integrity check (checkpoint.load verifies the manifest), newest
    # first, as checkpoint.load_latest_valid does; here each skipped one is also reported.
    skipped: list[str] = []
    loaded = None
    for _step, path in found:
        try:
            loaded = ckpt.load(path, keys=["model"])
            break
        except ckpt.CheckpointError as err:
            skipped.append(str(err))
    if loaded is None:
        raise ckpt.CheckpointError(
            f"none of the {len(found)} checkpoints of run {run_name!r} under {storage} is intact: "
            + " | ".join(skipped)
        )
    for s in skipped:
        log.warning("newest checkpoint is torn, serving the previous one instead: %s", s)
    model = build(model_config_of(loaded.meta))
    state = loaded.state["model"]
    # Checkpoints of a torch.compile'd or DDP-wrapped model carry prefixes; strip them.
    state = {k.removeprefix("_orig_mod.").removeprefix("module."): v for k, v in state.items()}
    model.load_state_dict(state)
    model.to(device or default_device()).eval()
    log.info("serving %s step %d from %s", run_name, loaded.step, loaded.path)
    return LoadedModel(model=model, run_name=run_name, step=loaded.step, path=loaded.path, skipped=skipped)


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
    attn, x: torch.Tensor, cache: _KVCache, layer: int, pos: torch.Tensor | None, mask: torch.Tensor | None, span: int
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
    if pos is None:
        cache.k[layer][:, :, :t] = k
        cache.v[layer][:, :, :t] = v
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        rows = torch.arange(b, device=x.device)
        cache.k[layer][rows, :, pos] = k[:, :, 0]
        cache.v[layer][rows, :, pos] = v[:, :, 0]
        y = F.scaled_dot_product_attention(q, cache.k[layer][:, :, :span], cache.v[layer][:, :, :span], attn_mask=mask)
    y = y.transpose(1, 2).contiguous().view(b, t, c)
    return attn.proj(y)


def _forward_cached(
    model: GPT, x: torch.Tensor, cache: _KVCache, pos: torch.Tensor | None, mask: torch.Tensor | None, span: int
) -> torch.Tensor:
    """``GPT.forward`` (eval mode) through the cache; hidden states before ``ln_f``."""
    positions = torch.arange(x.shape[1], device=x.device) if pos is None else pos.unsqueeze(1)
    z = model.tok_emb(x) + model.pos_emb(positions)
    for layer, block in enumerate(model.blocks):
        z = z + _attend(block.attn, block.ln1(z), cache, layer, pos, mask, span)
        z = z + block.mlp(block.ln2(z))
    return z


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
    model: GPT, prompt_ids: list[int], k: int
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
def stream_batch(model: GPT, requests: list[GenRequest]) -> Iterator[list[tuple[int, int]]]:
    """Generate for every request at once; yield, per step, ``[(request index, token id)]``.

    Requests drop out of the batch when they have their ``max_tokens``. The prompt batch runs
    once (prefill) and fills a key/value cache; every later step runs only the one new token per
    row against it. Once a row outgrows the context, positions shift with every token (the
    context is cropped to ``block_size`` like ``GPT.generate`` does), so the remaining steps
    recompute the cropped context in full.
    """
    block = model.config.block_size
    device = next(model.parameters()).device
    seqs = [list(r.prompt_ids) for r in requests]
    left = [r.max_tokens for r in requests]
    active = [i for i, n in enumerate(left) if n > 0]
    if not active:
        return
    cfg = model.config
    lens = [len(seqs[i]) for i in active]
    # The cache is valid while every row fits in the context (absolute positions unchanged).
    reach = min(block, max(len(seqs[i]) + left[i] - 1 for i in active))
    cache = None
    # The key/value cache follows the GPT's layers; other architectures (the training job's
    # Llama) recompute the context every step.
    if max(lens) <= block and isinstance(model, GPT):
        cache = _KVCache(
            cfg.n_layer, len(active), cfg.n_head, reach, cfg.n_embd // cfg.n_head, next(model.parameters())
        )
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
            logits = model.head(model.ln_f(last))
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


def generate_batch(model: GPT, requests: list[GenRequest]) -> list[list[int]]:
    """The generated token ids of every request (prompt excluded)."""
    result: list[list[int]] = [[] for _ in requests]
    for step in stream_batch(model, requests):
        for i, tok in step:
            result[i].append(tok)
    return result


def health_probe(model: GPT) -> None:
    """Raise unless the model really answers: finite logits and a valid greedy token."""
    with torch.no_grad():
        device = next(model.parameters()).device
        logits, _ = model(torch.tensor([[72, 105]], dtype=torch.long, device=device))
    if not bool(torch.isfinite(logits).all()):
        raise RuntimeError("model produced non-finite logits")
    tok = int(logits[0, -1].argmax())
    if not 0 <= tok < model.config.vocab_size or math.isnan(float(logits[0, -1, tok])):
        raise RuntimeError(f"model produced an invalid token {tok}")
