"""workloads/common/loss.py: the chunked cross-entropy equals the whole-logits one (loss and the
gradients of the hidden states and the output weight) and its peak memory at a 32k vocabulary
is at most a quarter of the whole's (bench/chunked_loss.py measures peak RSS in subprocesses)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bench.chunked_loss import compare
from workloads.common.loss import LossError, chunk_tokens_for, chunked_cross_entropy

# fp32 on CPU: the sums over 1000 classes and 300 tokens differ only by rounding order.
RTOL, ATOL = 1e-5, 1e-6


def inputs(dtype=torch.float32, shape=(3, 100), dim=32, vocab=1000):
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(*shape, dim, generator=g, dtype=dtype, requires_grad=True)
    weight = (torch.randn(vocab, dim, generator=g, dtype=dtype) / dim**0.5).requires_grad_()
    targets = torch.randint(0, vocab, shape, generator=g)
    targets[0, :7] = -100
    return hidden, weight, targets


def whole(hidden, weight, targets, reduction="mean"):
    logits = (hidden @ weight.T).float()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction=reduction)


def grads(loss, hidden, weight):
    return torch.autograd.grad(loss, (hidden, weight))


@pytest.mark.parametrize("chunk", [1, 37, 64, 300, 10_000])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_loss_and_gradients_equal_the_whole_logits(chunk, reduction):
    hidden, weight, targets = inputs()
    want = whole(hidden, weight, targets, reduction)
    got = chunked_cross_entropy(hidden, weight, targets, chunk_tokens=chunk, reduction=reduction)
    torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)
    for g, w in zip(grads(got, hidden, weight), grads(want, hidden, weight), strict=True):
        torch.testing.assert_close(g, w, rtol=RTOL, atol=ATOL)


def test_ignored_tokens_get_no_gradient_and_upstream_gradients_scale():
    hidden, weight, targets = inputs()
    loss = 3.0 * chunked_cross_entropy(hidden, weight, targets, chunk_tokens=50)
    gh, gw = grads(loss, hidden, weight)
    assert gh[0, :7].abs().max() == 0 and gh[0, 7:].abs().max() > 0
    wh, ww = grads(3.0 * whole(hidden, weight, targets), hidden, weight)
    torch.testing.assert_close((gh, gw), (wh, ww), rtol=RTOL, atol=ATOL)


def test_bf16_inputs_give_bf16_gradients_close_to_fp32():
    hidden, weight, targets = inputs(dtype=torch.bfloat16)
    got = chunked_cross_entropy(hidden, weight, targets, chunk_tokens=64)
    gh, gw = grads(got, hidden, weight)
    assert got.dtype == torch.float32 and gh.dtype == gw.dtype == torch.bfloat16
    h32, w32 = hidden.detach().float().requires_grad_(), weight.detach().float().requires_grad_()
    want = whole(h32, w32, targets)
    torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(gw.float(), grads(want, h32, w32)[1], rtol=5e-2, atol=5e-3)


def test_chunk_size_from_a_memory_budget():
    assert chunk_tokens_for(32768, max_chunk_mib=32) == 256
    assert chunk_tokens_for(128_256, max_chunk_mib=256) == 523
    assert chunk_tokens_for(10**9, max_chunk_mib=1) == 1


def test_bad_arguments_are_one_message():
    hidden, weight, targets = inputs()
    with pytest.raises(LossError) as info:
        chunked_cross_entropy(hidden, weight, targets, reduction="none")
    assert str(info.value) == "reduction 'none': allowed 'mean' or 'sum'"
    with pytest.raises(LossError) as info:
        chunked_cross_entropy(hidden, weight, targets[:, :5])
    assert str(info.value) == "targets shape (3, 5): allowed the hidden states' leading shape (3, 100)"
    with pytest.raises(LossError) as info:
        chunked_cross_entropy(hidden, weight[:, :8], targets)
    assert str(info.value) == "weight shape (1000, 8): allowed [vocab, 32]"
    with pytest.raises(LossError) as info:
        chunked_cross_entropy(hidden, weight, targets, chunk_tokens=0)
    assert str(info.value) == "chunk_tokens 0: allowed 1 or more"


def test_peak_memory_at_a_32k_vocabulary_is_at_most_a_quarter_of_the_whole():
    r = compare(tokens=2048, dim=256, vocab=32768, chunk=256)
    # The whole holds at least the fp32 logits (256 MiB) and their gradient.
    assert r["whole_peak_mib"] >= 2 * r["logits_fp32_mib"]
    assert r["peak_ratio"] <= 0.25, r
    assert r["loss_difference"] < 1e-4, r
