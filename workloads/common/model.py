"""Causal language models in plain PyTorch over byte-level tokens: a Llama-style decoder (the
training job's model) and a small GPT (kept as ``arch: gpt`` for small DDP runs and the inference
app's tests).

Shared by the training job (``workloads.training``) and the inference app. The API is stable:

- ``LlamaConfig`` / ``Llama(config)``: RMSNorm, rotary position embeddings, SwiGLU feed-forward,
  grouped-query attention (``n_kv_head`` key/value heads shared by ``n_head`` query heads);
  ``layers`` is the list of decoder blocks (the units FSDP shards and activation checkpointing
  wraps). Same ``forward``/``generate`` contract as ``GPT``.
- ``rotate(x, cos, sin)``: the rotary embedding the Llama applies to queries and keys (the
  inference engine applies it to cached keys).
- ``config_from_dict(d)`` / ``build(config)``: the architecture stored in a checkpoint's meta
  (``arch`` key, ``gpt`` when absent) and the module for it.
- ``count_parameters(config)``: parameters of the architecture, built on the meta device.
- ``init_parameters(model, seed)``: the initial values ``torch.manual_seed(seed); build(config)``
  gives, written into a model built on the meta device, sharded with FSDP2 and allocated with
  ``to_empty``: each rank keeps only its shards, one whole tensor is drawn at a time.

- ``GPTConfig``: the architecture (frozen dataclass); ``GPTConfig.to_dict()`` /
  ``GPTConfig.from_dict(d)`` round-trip it through a checkpoint's ``meta.json``.
- ``GPT(config)``: ``forward(idx, targets=None, *, logits=True) -> (logits, loss)``; ``idx`` is a
  LongTensor ``(batch, time)`` of token ids with ``time <= config.block_size``; ``loss`` is the
  mean next-token cross entropy when ``targets`` is given (chunked: workloads/common/loss.py),
  else None. ``logits`` has shape ``(batch, time, vocab_size)``; None with ``logits=False`` and
  targets (the train step's call: no logits kept at all).
- ``GPT.generate(idx, max_new_tokens, temperature=1.0, top_k=None, generator=None)``: autoregressive
  sampling (greedy when ``temperature == 0``), cropping the context to ``block_size``.
- ``encode(text) -> list[int]`` / ``decode(ids) -> str``: the byte-level tokenizer (UTF-8 bytes,
  vocabulary of 256; ``decode`` replaces invalid byte sequences).
- ``flops_per_token(config)``: model FLOPs per trained token (6N + attention), for MFU figures.

One module because both architectures share the tokenizer, generation, the FLOP count and the
initialization that replays the same random stream; the checkpoint format names the module.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import Field, asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar, Self, SupportsInt

import torch
import torch.utils.checkpoint
from torch import nn
from torch.nn import functional as F

from workloads.common.loss import chunked_cross_entropy

VOCAB_SIZE = 256  # byte-level tokens: every UTF-8 byte is one token, nothing to download


def encode(text: str) -> list[int]:
    """UTF-8 bytes of ``text`` as token ids (0..255)."""
    return list(text.encode("utf-8"))


def decode(ids: Iterable[SupportsInt]) -> str:
    """Token ids back to text; invalid UTF-8 sequences become U+FFFD."""
    return bytes(int(i) & 0xFF for i in ids).decode("utf-8", errors="replace")


class _ArchConfig:
    """What both architectures' configs share: the head check and the round trip through a
    checkpoint's ``meta.json`` (the ``arch`` key names the architecture)."""

    ARCH: ClassVar[str]
    # Declared so that mypy reads the subclasses (all dataclasses) as dataclasses here.
    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]
    n_embd: int
    n_head: int
    block_size: int

    def __post_init__(self) -> None:
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")

    def to_dict(self) -> dict[str, Any]:
        return {"arch": self.ARCH, **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class GPTConfig(_ArchConfig):
    """Architecture of the model. ``n_embd`` must be divisible by ``n_head``."""

    ARCH: ClassVar[str] = "gpt"

    block_size: int = 128
    vocab_size: int = VOCAB_SIZE
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.dropout = cfg.dropout
        self.resid_drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        out: torch.Tensor = self.resid_drop(self.proj(y))
        return out


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.n_embd, 4 * cfg.n_embd),
            nn.GELU(),
            nn.Linear(4 * cfg.n_embd, cfg.n_embd),
            nn.Dropout(cfg.dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        out: torch.Tensor = x + self.mlp(self.ln2(x))
        return out


class _Generate:
    config: GPTConfig | LlamaConfig

    if TYPE_CHECKING:  # nn.Module's, which the models mix this class with

        def __call__(
            self, idx: torch.Tensor, targets: torch.Tensor | None = None, *, logits: bool = True
        ) -> tuple[torch.Tensor, torch.Tensor | None]: ...

    @torch.no_grad()
    def generate(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Append ``max_new_tokens`` sampled tokens to ``idx`` (batch, time) and return it."""
        for _ in range(max_new_tokens):
            context = idx[:, -self.config.block_size :]
            logits, _ = self(context)
            logits = logits[:, -1, :]
            if temperature == 0:
                nxt = logits.argmax(dim=-1, keepdim=True)
            else:
                logits = logits / temperature
                if top_k is not None:
                    kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, -1:]
                    logits = logits.masked_fill(logits < kth, -math.inf)
                probs = F.softmax(logits, dim=-1)
                nxt = torch.multinomial(probs, num_samples=1, generator=generator)
            idx = torch.cat([idx, nxt], dim=1)
        return idx


class GPT(_Generate, nn.Module):
    """Decoder-only transformer with learned positions and tied input/output embeddings."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config: GPTConfig = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.n_embd)
        self.pos_emb = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.head.weight = self.tok_emb.weight
        self.apply(self._init)

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None, *, logits: bool = True
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        _, t = idx.shape
        if t > self.config.block_size:
            raise ValueError(f"sequence length {t} exceeds block_size {self.config.block_size}")
        pos = torch.arange(t, device=idx.device)
        x = self.drop(self.tok_emb(idx) + self.pos_emb(pos))
        for block in self.blocks:
            x = block(x)
        return _output(self.head, self.ln_f(x), targets, logits)


def _output(
    head: nn.Linear, hidden: torch.Tensor, targets: torch.Tensor | None, want_logits: bool
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The models' output layer: the logits (unless ``want_logits`` is false: the train step's
    ``logits=False``) and the mean next-token cross entropy against ``targets``, computed chunk
    by chunk (workloads/common/loss.py) so that no fp32 copy of every logit exists. Under
    autocast both operands take its dtype, as the head's own matmul would."""
    loss = None
    if targets is not None and hidden.is_meta:
        # The meta device (shapes only; no data-dependent indexing): the plain loss's shapes.
        loss = F.cross_entropy(head(hidden).flatten(0, -2), targets.reshape(-1))
    elif targets is not None:
        weight = head.weight
        if hidden.device.type in ("cpu", "cuda") and torch.is_autocast_enabled(hidden.device.type):
            dtype = torch.get_autocast_dtype(hidden.device.type)
            hidden, weight = hidden.to(dtype), weight.to(dtype)
        loss = chunked_cross_entropy(hidden, weight, targets)
    return (head(hidden) if want_logits or targets is None else None), loss


def flops_per_token(config: GPTConfig | LlamaConfig) -> float:
    """Training FLOPs per token: 6 x (the blocks' parameters + the output layer's n_embd x
    vocab_size; the embedding is a lookup) + 12 x layers x context x width for attention scores
    (the PaLM paper's appendix B accounting)."""
    if isinstance(config, LlamaConfig):
        n = config.n_layer * config.layer_parameters()
    else:
        n = config.n_layer * 12 * config.n_embd**2
    attn = 12 * config.n_layer * config.block_size * config.n_embd
    return 6.0 * (n + config.n_embd * config.vocab_size) + attn


@dataclass(frozen=True)
class LlamaConfig(_ArchConfig):
    """A Llama-style decoder. ``n_head`` must divide ``n_embd`` and ``n_kv_head`` ``n_head``;
    ``ffn_hidden`` is the SwiGLU width."""

    ARCH: ClassVar[str] = "llama"

    block_size: int = 128
    vocab_size: int = VOCAB_SIZE
    n_layer: int = 2
    n_head: int = 4
    n_kv_head: int = 2
    n_embd: int = 64
    ffn_hidden: int = 192
    rope_theta: float = 500000.0
    norm_eps: float = 1e-5
    # Llama 3.1 frequency scaling, as Hugging Face's config.json spells it: {"rope_type": "llama3",
    # "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}.
    # None (plain rotary) is left out of to_dict, so earlier checkpoints' meta is unchanged.
    rope_scaling: dict[str, Any] | None = field(default=None, hash=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.rope_scaling is not None:
            missing = sorted(set(_LLAMA3_KEYS) - set(self.rope_scaling))
            if self.rope_scaling.get("rope_type") != "llama3" or missing:
                raise ValueError(
                    f"rope_scaling {self.rope_scaling!r} is not supported; allowed: null, or rope_type 'llama3' "
                    f"with {', '.join(_LLAMA3_KEYS)}"
                )
        if self.n_head % self.n_kv_head:
            raise ValueError(f"n_head ({self.n_head}) must be divisible by n_kv_head ({self.n_kv_head})")
        if (self.n_embd // self.n_head) % 2:
            raise ValueError(f"head size n_embd/n_head ({self.n_embd // self.n_head}) must be even (rotary)")

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        if out["rope_scaling"] is None:
            del out["rope_scaling"]
        return out

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def layer_parameters(self) -> int:
        """Parameters of one decoder block: q/o projections, grouped k/v, SwiGLU, two RMSNorms."""
        d, kv = self.n_embd, self.n_kv_head * self.head_dim
        return 2 * d * d + 2 * d * kv + 3 * d * self.ffn_hidden + 2 * d


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalised in fp32 (bf16 loses the small variances), returned in the input's dtype.
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


_LLAMA3_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


def _llama3_scaled(inv: torch.Tensor, scaling: dict[str, Any]) -> torch.Tensor:
    """Llama 3.1's rescaled inverse frequencies (transformers' ``_compute_llama3_parameters``):
    long wavelengths divided by ``factor``, short ones kept, the band between interpolated."""
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_len = scaling["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old_len / low, old_len / high
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def _rope_tables(cfg: LlamaConfig, device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, device=device).float() / cfg.head_dim))
    if cfg.rope_scaling is not None:
        inv = _llama3_scaled(inv, cfg.rope_scaling)
    angles = torch.outer(torch.arange(cfg.block_size, device=device).float(), inv)
    return angles.cos(), angles.sin()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding on (batch, heads, time, head_dim), pairs (even, odd) rotated together."""
    x1, x2 = x.float()[..., 0::2], x.float()[..., 1::2]
    out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)
    return out.type_as(x)


class GroupedQueryAttention(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.n_head, self.n_kv_head, self.head_dim = cfg.n_head, cfg.n_kv_head, cfg.head_dim
        self.wq = nn.Linear(cfg.n_embd, cfg.n_head * cfg.head_dim, bias=False)
        self.wk = nn.Linear(cfg.n_embd, cfg.n_kv_head * cfg.head_dim, bias=False)
        self.wv = nn.Linear(cfg.n_embd, cfg.n_kv_head * cfg.head_dim, bias=False)
        self.wo = nn.Linear(cfg.n_head * cfg.head_dim, cfg.n_embd, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.n_head, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, t, self.n_kv_head, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, t, self.n_kv_head, self.head_dim).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.n_kv_head != self.n_head)
        out: torch.Tensor = self.wo(y.transpose(1, 2).reshape(b, t, -1))
        return out


class SwiGLU(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.w_gate = nn.Linear(cfg.n_embd, cfg.ffn_hidden, bias=False)
        self.w_up = nn.Linear(cfg.n_embd, cfg.ffn_hidden, bias=False)
        self.w_down = nn.Linear(cfg.ffn_hidden, cfg.n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))
        return out


class LlamaBlock(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.attn = GroupedQueryAttention(cfg)
        self.mlp_norm = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.mlp = SwiGLU(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin)
        out: torch.Tensor = x + self.mlp(self.mlp_norm(x))
        return out


class Llama(_Generate, nn.Module):
    """Decoder-only transformer, pre-norm, untied input and output embeddings (as Llama 3)."""

    rope_cos: torch.Tensor  # buffers, registered in __init__
    rope_sin: torch.Tensor

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config: LlamaConfig = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.n_embd)
        self.layers = nn.ModuleList(LlamaBlock(config) for _ in range(config.n_layer))
        self.norm = RMSNorm(config.n_embd, config.norm_eps)
        self.head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        # Not parameters: recomputed from the config, so checkpoints and FSDP ignore them.
        cos, sin = _rope_tables(config)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.activation_checkpointing = False
        self.checkpoint_every = 1  # with activation_checkpointing: recompute blocks 0, n, 2n, ...
        self.apply(self._init)

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    @torch.no_grad()
    def reset_buffers(self) -> None:
        """Recompute the rotary tables in place (on the CPU, as ``__init__`` does), e.g. after
        ``to_empty``."""
        cos, sin = _rope_tables(self.config)
        self.rope_cos.copy_(cos)
        self.rope_sin.copy_(sin)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None, *, logits: bool = True
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        _, t = idx.shape
        if t > self.config.block_size:
            raise ValueError(f"sequence length {t} exceeds block_size {self.config.block_size}")
        cos, sin = self.rope_cos[:t], self.rope_sin[:t]
        x = self.tok_emb(idx)
        recompute = self.training and self.activation_checkpointing
        for i, layer in enumerate(self.layers):
            if recompute and i % self.checkpoint_every == 0:  # keep only the block's input; recompute the rest
                x = torch.utils.checkpoint.checkpoint(layer, x, cos, sin, use_reentrant=False)
            else:
                x = layer(x, cos, sin)
        return _output(self.head, self.norm(x), targets, logits)


def config_from_dict(data: dict[str, Any]) -> GPTConfig | LlamaConfig:
    """The architecture a checkpoint's meta (or the job's settings) describes."""
    if data.get("arch", "gpt") == "llama":
        return LlamaConfig.from_dict(data)
    return GPTConfig.from_dict(data)


def build(config: GPTConfig | LlamaConfig) -> GPT | Llama:
    return Llama(config) if isinstance(config, LlamaConfig) else GPT(config)


def count_parameters(config: GPTConfig | LlamaConfig) -> int:
    """Parameters of ``config``'s model, built on the meta device (no memory, no time)."""
    with torch.device("meta"):
        return build(config).num_parameters()


def _leaves(module: nn.Module, prefix: str = "", post_order: bool = False) -> Iterator[tuple[str, nn.Module]]:
    """``(name, module)`` of the modules that hold parameters themselves, in construction order
    (pre-order) or in ``nn.Module.apply``'s order (post-order)."""
    if not post_order and next(module.parameters(recurse=False), None) is not None:
        yield prefix, module
    for name, child in module.named_children():
        yield from _leaves(child, f"{prefix}{name}.", post_order)
    if post_order and next(module.parameters(recurse=False), None) is not None:
        yield prefix, module


@torch.no_grad()
def init_parameters(model: GPT | Llama, seed: int) -> None:
    """Write into ``model`` exactly the initial values ``torch.manual_seed(seed);
    build(model.config)`` gives, one module's tensors at a time, so a model built on the meta
    device and sharded with FSDP2 (``fully_shard``, then ``to_empty``) is never whole on a rank.

    The random stream is replayed in the order the full build draws it: every module's
    ``reset_parameters`` in construction order (the constructors' defaults, drawn and mostly
    overwritten), then the model's ``_init`` in ``apply`` order. Each value is drawn whole on
    the CPU (the same bits on every rank and device) and each rank keeps its own shard.
    Reseeds torch's global generator, as building the model does."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    with torch.device("meta"):
        shadow = build(model.config)  # shapes only: each module is materialised in turn

    def write(prefix: str, module: nn.Module, only_written: bool) -> None:
        for name, value in module.named_parameters(recurse=False):
            if only_written:
                untouched = value.isnan()
                if untouched.all():
                    continue  # not touched by _init: keeps its reset_parameters value
                if untouched.any():
                    raise ValueError(f"{prefix}{name}: _init wrote part of it; init_parameters cannot replay that")
            target = model.get_parameter(prefix + name)
            if isinstance(target, DTensor):
                shard = distribute_tensor(value, target.device_mesh, target.placements, src_data_rank=None)
                target.to_local().copy_(shard.to_local())
            else:
                target.copy_(value)

    torch.manual_seed(seed)
    for prefix, module in _leaves(shadow):
        module.to_empty(device="cpu")
        # Every leaf (Linear, Embedding, LayerNorm, RMSNorm) has one; nn.Module declares none.
        module.reset_parameters()  # type: ignore[operator]
        write(prefix, module, only_written=False)
        module.to_empty(device="meta")
    for prefix, module in _leaves(shadow, post_order=True):
        module.to_empty(device="cpu")
        for p in module.parameters(recurse=False):
            p.fill_(math.nan)
        shadow._init(module)
        write(prefix, module, only_written=True)
        module.to_empty(device="meta")
    if isinstance(model, Llama):  # the one with buffers
        model.reset_buffers()
