"""Evaluation in the train loop: the loss on fixed held-out windows (workloads/training/data.py
``HeldOut``: the first windows of the dataset's validation split, or the raw corpus's last
windows), with perplexity and bits per byte.

Every evaluation reads the same windows: ``eval_batches`` global batches of the configured
workers (``held_out_count``), whatever the current world size, cut into batches of
``batch_size_per_worker`` per rank; a rank whose last batch runs past the end pads it with
ignored targets, so every rank runs as many forwards (FSDP's collectives) and every window
counts once. The token losses and token counts are summed in float64 over the ranks, so a
resumed run evaluates to the same value bitwise at the same world size, and within float
rounding at another.

Bits per byte: nats per token / ln 2 / (UTF-8 bytes per token of the split): 1 byte per token
for byte tokens; for a tokenizer, the validation split's byte count that pretokenize records in
the manifest (``extra.split_bytes``) over its tokens (EOS tokens included; no bits per byte for
a dataset without the count).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch import nn

    from workloads.training.data import HeldOut

IGNORE = -100  # workloads/common/loss.py's default ignore_index


def evaluate(
    model: nn.Module,
    held: HeldOut,
    *,
    rank: int,
    world: int,
    batch_size: int,
    device: torch.device,
    autocast_dtype: torch.dtype | None = None,
) -> dict[str, float]:
    """``val_loss`` (mean nats per token), ``val_perplexity`` and, where known,
    ``val_bits_per_byte`` of ``model`` on ``held`` (a collective: every rank calls it)."""
    import torch
    import torch.distributed as dist

    totals = torch.tensor(
        eval_sums(
            model, held, rank=rank, world=world, batch_size=batch_size, device=device, autocast_dtype=autocast_dtype
        ),
        dtype=torch.float64,
        device=device,
    )
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(totals)
    loss_sum, tokens = totals.tolist()
    return eval_metrics(loss_sum, tokens, held.bytes_per_token)


def eval_metrics(loss_sum: float, tokens: float, bytes_per_token: float | None) -> dict[str, float]:
    mean = loss_sum / tokens
    out = {"val_loss": mean, "val_perplexity": math.exp(min(mean, 700.0))}
    if bytes_per_token:
        out["val_bits_per_byte"] = mean / math.log(2) / bytes_per_token
    return out


def eval_sums(
    model: nn.Module,
    held: HeldOut,
    *,
    rank: int,
    world: int,
    batch_size: int,
    device: torch.device,
    autocast_dtype: torch.dtype | None = None,
) -> tuple[float, float]:
    """This rank's (sum of token losses, tokens) over its share of ``held``."""
    import numpy as np
    import torch

    per_global = world * batch_size
    batches = -(-held.count // per_global)
    loss_sum, tokens = 0.0, 0.0
    was_training = model.training
    model.eval()
    with (
        torch.no_grad(),
        torch.autocast(
            device_type=device.type,
            dtype=autocast_dtype or torch.float32,
            enabled=autocast_dtype is not None,
        ),
    ):
        for b in range(batches):
            idx = b * per_global + rank * batch_size + np.arange(batch_size, dtype=np.int64)
            valid = torch.from_numpy(idx < held.count)
            windows = held.read(np.minimum(idx, held.count - 1))
            x, y = windows[:, :-1], windows[:, 1:].clone()
            y[~valid] = IGNORE
            counted = int(valid.sum()) * y.shape[1]
            _, loss = model(x.to(device), y.to(device), logits=False)
            loss_sum += float(loss.double().item()) * counted
            tokens += counted
    model.train(was_training)
    return loss_sum, tokens
