"""Peak memory of the loss: chunked cross-entropy (workloads/common/loss.py) against the whole
logits (``F.cross_entropy(hidden @ W.T)``), forward and backward, fp32 on CPU.

How peak memory is measured: each variant runs in its own subprocess, which builds its inputs,
runs the variant once small (warm-up: thread pools, kernels), resets the kernel's peak-RSS
counter (``echo 5 > /proc/self/clear_refs``, Linux) and records its RSS, runs forward and
backward, then reads the peak (``VmHWM``). The figure is peak minus the RSS before: every byte
the loss made resident, whatever allocated it (torch's CPU allocator has no peak statistic, and
tracemalloc does not see it). Page granularity and malloc's arenas make it a slight overestimate.

    .venv/bin/python bench/chunked_loss.py            # 2048 tokens x 32k vocab, seconds
    .venv/bin/python bench/chunked_loss.py --full     # 8192 tokens x 32k vocab
    python bench/chunked_loss.py --device cuda --full --vocab 128256   # on a GPU: torch.cuda peak

On ``--device cuda`` the peak is ``torch.cuda.max_memory_allocated`` after a reset, minus the
memory allocated before (the caching allocator's own account, exact for tensors).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def _child(mode: str, tokens: int, dim: int, vocab: int, chunk: int, device: str = "cpu") -> dict[str, float]:
    import torch
    import torch.nn.functional as F

    from workloads.common.loss import chunked_cross_entropy

    torch.manual_seed(0)

    def loss_of(h: torch.Tensor, w: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        if mode == "whole":
            return F.cross_entropy(h @ w.T, t)
        return chunked_cross_entropy(h, w, t, chunk_tokens=chunk)

    dev = torch.device(device)
    small = [
        torch.randn(64, dim, requires_grad=True, device=dev),
        torch.randn(vocab, dim, requires_grad=True, device=dev),
    ]
    loss_of(small[0], small[1], torch.randint(0, vocab, (64,), device=dev)).backward()
    del small
    hidden = torch.randn(tokens, dim, requires_grad=True, device=dev)
    weight = (torch.randn(vocab, dim, device=dev) * dim**-0.5).requires_grad_()
    targets = torch.randint(0, vocab, (tokens,), device=dev)
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    else:
        Path("/proc/self/clear_refs").write_text("5")
        before = _status("VmRSS")
    t0 = time.perf_counter()
    loss = loss_of(hidden, weight, targets)
    loss.backward()
    if dev.type == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
    seconds = time.perf_counter() - t0
    if dev.type != "cuda":
        peak = _status("VmHWM")
    return {"peak_growth": peak - before, "seconds": seconds, "loss": float(loss)}


def measure(mode: str, tokens: int, dim: int, vocab: int, chunk: int, device: str = "cpu") -> dict[str, float]:
    """Run one variant in a fresh subprocess; its peak RSS growth (bytes), seconds and loss."""
    code = (
        f"import json, sys; sys.path.insert(0, {str(ROOT)!r}); from bench.chunked_loss import _child; "
        f"print(json.dumps(_child({mode!r}, {tokens}, {dim}, {vocab}, {chunk}, {device!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def compare(tokens: int, dim: int, vocab: int, chunk: int, device: str = "cpu") -> dict[str, float]:
    whole = measure("whole", tokens, dim, vocab, chunk, device)
    chunked = measure("chunked", tokens, dim, vocab, chunk, device)
    return {
        "tokens": tokens,
        "dim": dim,
        "vocab": vocab,
        "chunk_tokens": chunk,
        "logits_fp32_mib": tokens * vocab * 4 / 2**20,
        "whole_peak_mib": whole["peak_growth"] / 2**20,
        "chunked_peak_mib": chunked["peak_growth"] / 2**20,
        "peak_ratio": chunked["peak_growth"] / whole["peak_growth"],
        "whole_s": whole["seconds"],
        "chunked_s": chunked["seconds"],
        "time_ratio": chunked["seconds"] / whole["seconds"],
        "loss_difference": abs(whole["loss"] - chunked["loss"]),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--full", action="store_true", help="8192 tokens, dim 512 (default: 2048 tokens, dim 256)")
    p.add_argument("--vocab", type=int, default=32768)
    p.add_argument("--chunk", type=int, default=256, help="tokens per chunk")
    p.add_argument("--device", default="cpu", help="cpu (peak RSS) or cuda (torch.cuda peak allocated)")
    a = p.parse_args(argv)
    tokens, dim = (8192, 512) if a.full else (2048, 256)
    r = compare(tokens, dim, a.vocab, a.chunk, a.device)
    print(json.dumps(r, indent=1))
    print(
        f"peak memory of the loss (fwd+bwd), {tokens} tokens x {a.vocab} vocab (whole fp32 logits "
        f"{r['logits_fp32_mib']:.0f} MiB): whole {r['whole_peak_mib']:.0f} MiB, chunked ({a.chunk} tokens) "
        f"{r['chunked_peak_mib']:.0f} MiB, ratio {r['peak_ratio']:.3f}; time chunked/whole {r['time_ratio']:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
