"""A small GPT-style causal language model in plain PyTorch, over byte-level tokens.

Shared by the training job (``workloads.training``) and the inference app. The API is stable:

- ``GPTConfig``: the architecture (frozen dataclass); ``GPTConfig.to_dict()`` /
  ``GPTConfig.from_dict(d)`` round-trip it through a checkpoint's ``meta.json``.
- ``GPT(config)``: ``forward(idx, targets=None) -> (logits, loss)``; ``idx`` is a LongTensor
  ``(batch, time)`` of token ids with ``time <= config.block_size``; ``loss`` is the mean
  next-token cross entropy when ``targets`` is given, else None. ``logits`` has shape
  ``(batch, time, vocab_size)``.
- ``GPT.generate(idx, max_new_tokens, temperature=1.0, top_k=None, generator=None)``: autoregressive
  sampling (greedy when ``temperature == 0``), cropping the context to ``block_size``.
- ``encode(text) -> list[int]`` / ``decode(ids) -> str``: the byte-level tokenizer (UTF-8 bytes,
  vocabulary of 256; ``decode`` replaces invalid byte sequences).
- ``flops_per_token(config)``: model FLOPs per trained token (6N + attention), for MFU figures.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import torch
from torch import nn
from torch.nn import functional as F

VOCAB_SIZE = 256  # byte-level tokens: every UTF-8 byte is one token, nothing to download


def encode(text: str) -> list[int]:
    """UTF-8 bytes of ``text`` as token ids (0..255)."""
    return list(text.encode("utf-8"))


def decode(ids) -> str:
    """Token ids back to text; invalid UTF-8 sequences become U+FFFD."""
    return bytes(int(i) & 0xFF for i in ids).decode("utf-8", errors="replace")


@dataclass(frozen=True)
class GPTConfig:
    """Architecture of the model. ``n_embd`` must be divisible by ``n_head``."""

    block_size: int = 128
    vocab_size: int = VOCAB_SIZE
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0

    def __post_init__(self):
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> GPTConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


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
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
        )
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        return self.resid_drop(self.proj(y))


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
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Decoder-only transformer with learned positions and tied input/output embeddings."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
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

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        _, t = idx.shape
        if t > self.config.block_size:
            raise ValueError(f"sequence length {t} exceeds block_size {self.config.block_size}")
        pos = torch.arange(t, device=idx.device)
        x = self.drop(self.tok_emb(idx) + self.pos_emb(pos))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss

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


def flops_per_token(config: GPTConfig) -> float:
    """Training FLOPs per token: 6 x non-embedding parameters + 12 x layers x context x width
    for attention scores (the PaLM paper's appendix B accounting)."""
    n = config.n_layer * 12 * config.n_embd**2
    attn = 12 * config.n_layer * config.block_size * config.n_embd
    return 6.0 * n + attn
