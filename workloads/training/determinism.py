"""Deterministic kernels for a training process (``training.deterministic``).

What is bitwise without this: a resume on CPU with gloo (the same ops in the same order on the
same data). On GPUs some kernels (atomics in index and scatter backward passes, cuBLAS split-K
reductions, cuDNN autotuning) may differ from run to run in the last bits; a resumed run then
stays within a small tolerance of an uninterrupted one rather than matching it. Turning this on
asks PyTorch for the deterministic kernel of every op (an op without one raises), pins cuBLAS's
workspace so its reductions repeat, and turns cuDNN's autotuner off. It costs step time; the
figure is in docs/benchmarks.md.
"""

from __future__ import annotations

import os

# cuBLAS repeats its results only with a fixed workspace configuration (CUDA docs, "Results
# reproducibility"); PyTorch raises in deterministic mode on CUDA >= 10.2 without it.
CUBLAS_WORKSPACE_CONFIG = ":4096:8"


def use_deterministic(enabled: bool) -> None:
    """Turn deterministic kernels on or off for this process. Call it before the first CUDA
    work: cuBLAS reads its workspace setting when its handle is created."""
    import torch

    if enabled:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE_CONFIG)
    torch.use_deterministic_algorithms(enabled)
    torch.backends.cudnn.deterministic = enabled
    torch.backends.cudnn.benchmark = not enabled and torch.backends.cudnn.benchmark
