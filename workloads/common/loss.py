"""Cross-entropy over the output projection without every logit in memory at once.

    loss = chunked_cross_entropy(hidden, model.lm_head.weight, targets)   # == F.cross_entropy(hidden @ W.T, targets)

With a 128k vocabulary, the logits of one 8 x 2048-token batch are 8 GiB in fp32, and their
gradient as much again. :class:`ChunkedCrossEntropy` computes the logits of ``chunk`` tokens at a
time in fp32, keeps only each token's log-sum-exp and target logit, and in backward recomputes
each chunk's logits to form ``softmax - onehot`` and the chunk's share of both gradients
(hidden states and output weight). Peak memory is a few chunks' logits, not the whole.
Cost: the projection's matmul runs twice forward (once in forward, once in backward).
"""

from __future__ import annotations

from typing import Any

import torch

DEFAULT_CHUNK_MIB = 256.0


class LossError(ValueError):
    """Arguments the chunked loss cannot take."""


def chunk_tokens_for(vocab_size: int, max_chunk_mib: float = DEFAULT_CHUNK_MIB) -> int:
    """The most tokens whose fp32 logits fit in ``max_chunk_mib`` MiB (at least 1)."""
    return max(1, int(max_chunk_mib * (1 << 20)) // (4 * vocab_size))


class ChunkedCrossEntropy(torch.autograd.Function):
    """Sum of token cross-entropies of ``hidden @ weight.T`` against ``targets``, chunk by chunk."""

    @staticmethod
    def forward(
        ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk: int, ignore_index: int
    ) -> torch.Tensor:
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        lse = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
        for start in range(0, hidden.shape[0], chunk):
            h, t = hidden[start : start + chunk], targets[start : start + chunk]
            logits = (h @ weight.T).float()
            lse_c = torch.logsumexp(logits, dim=-1)
            keep = t != ignore_index
            target_logit = logits.gather(1, t.clamp(min=0).unsqueeze(1)).squeeze(1)
            total += ((lse_c - target_logit) * keep).sum()
            lse[start : start + chunk] = lse_c
            del logits
        ctx.save_for_backward(hidden, weight, targets, lse)
        ctx.chunk, ctx.ignore_index = chunk, ignore_index
        return total

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[Any, ...]:
        hidden, weight, targets, lse = ctx.saved_tensors
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_h = torch.empty_like(hidden) if need_h else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None
        for start in range(0, hidden.shape[0], ctx.chunk):
            h, t = hidden[start : start + ctx.chunk], targets[start : start + ctx.chunk]
            # d(lse - logit_t)/d logits = softmax - onehot(t); rows of ignored tokens are zero.
            g = (h @ weight.T).float()
            g.sub_(lse[start : start + ctx.chunk].unsqueeze(1)).exp_()
            keep = t != ctx.ignore_index
            rows = torch.arange(len(t), device=g.device)
            g[rows[keep], t[keep]] -= 1.0
            g.mul_((keep.to(g.dtype) * grad_out).unsqueeze(1))
            # In the weights' dtype (no fp32 copy of a bf16 weight); the weight's gradient is
            # accumulated over chunks in fp32.
            g_low = g if g.dtype == weight.dtype else g.to(weight.dtype)
            if grad_h is not None:
                grad_h[start : start + ctx.chunk] = (g_low @ weight).to(hidden.dtype)
            if grad_w is not None:
                if weight.dtype == torch.float32 and h.dtype == torch.float32:
                    grad_w.addmm_(g.T, h)
                else:
                    grad_w.add_(g_low.T @ h.to(weight.dtype))
            del g
        return grad_h, (None if grad_w is None else grad_w.to(weight.dtype)), None, None, None


def chunked_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    chunk_tokens: int | None = None,
    max_chunk_mib: float = DEFAULT_CHUNK_MIB,
    ignore_index: int = -100,
    reduction: str = "mean",
) -> torch.Tensor:
    """``F.cross_entropy(hidden @ weight.T, targets, ignore_index=..., reduction=...)`` computed
    ``chunk_tokens`` tokens at a time (default: as many as fit ``max_chunk_mib`` of fp32 logits).

    ``hidden``: ``[..., D]``; ``weight``: ``[V, D]`` (the output projection, no bias);
    ``targets``: ``hidden.shape[:-1]`` of ids in ``[0, V)`` or ``ignore_index``.
    ``reduction``: ``"mean"`` over the tokens not ignored, or ``"sum"``.
    """
    if reduction not in ("mean", "sum"):
        raise LossError(f"reduction {reduction!r}: allowed 'mean' or 'sum'")
    if hidden.shape[:-1] != targets.shape:
        raise LossError(
            f"targets shape {tuple(targets.shape)}: allowed the hidden states' leading shape {tuple(hidden.shape[:-1])}"
        )
    if weight.dim() != 2 or weight.shape[1] != hidden.shape[-1]:
        raise LossError(f"weight shape {tuple(weight.shape)}: allowed [vocab, {hidden.shape[-1]}]")
    chunk = chunk_tokens if chunk_tokens is not None else chunk_tokens_for(weight.shape[0], max_chunk_mib)
    if chunk < 1:
        raise LossError(f"chunk_tokens {chunk}: allowed 1 or more")
    flat_t = targets.reshape(-1)
    total = ChunkedCrossEntropy.apply(hidden.reshape(-1, hidden.shape[-1]), weight, flat_t, chunk, ignore_index)  # type: ignore[no-untyped-call]
    if reduction == "sum":
        return total  # type: ignore[no-any-return]
    return total / (flat_t != ignore_index).sum().clamp(min=1)  # type: ignore[no-any-return]
