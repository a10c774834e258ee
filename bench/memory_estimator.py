"""The memory estimator (``sizing.training.memory_per_gpu``) against the job's own model.

    .venv/bin/python bench/memory_estimator.py

Two parts, both on the CPU:

- Exact counts, every preset (``config.training.PRESETS``): the job's model built on the meta
  device (no memory, no compute) takes a real forward, backward and AdamW step
  (``make_optimizer``); the bytes of its parameters, gradients and AdamW moments are compared
  with the estimate for one whole copy (DDP). ``tests/sizing/test_memory_estimator.py`` also
  counts the FSDP shards of each rank.
- Activations, small shapes: the peak of the bytes the CPU allocator holds during the job's
  forward and backward (``torch.profiler`` memory events), in fp32, after one warm-up step so
  the gradients already exist (a step accumulates into them), against the estimate's
  ``activations`` term. The ratio is the estimator's margin, stated in docs/benchmarks.md.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Small shapes whose step the 2-core machine runs in seconds: (label, training.model).
SHAPES: dict[str, dict[str, Any]] = {
    "tiny (2 x 64, 64 tokens)": {"preset": "tiny"},
    "4 x 128, 128 tokens": {
        "arch": "llama",
        "n_layer": 4,
        "n_head": 4,
        "n_kv_head": 2,
        "n_embd": 128,
        "ffn_hidden": 384,
        "block_size": 128,
    },
}
BATCH = 4


def exact_bytes(preset: str) -> dict[str, int]:
    """Bytes of the parameters, gradients, AdamW moments and AdamW step counters of one whole
    copy of ``preset``'s model, from a real step on the meta device."""
    import torch

    from config.training import Training
    from workloads.common.model import build, config_from_dict
    from workloads.training.job import make_optimizer

    t = Training.model_validate({"model": {"preset": preset}, "sharding": "ddp"})
    with torch.device("meta"):
        model = build(config_from_dict(t.model.architecture()))
    model.train()
    x = torch.zeros((1, 8), dtype=torch.long, device="meta")
    _, loss = model(x, x)
    assert loss is not None
    loss.backward()
    opt = make_optimizer(model, learning_rate=1e-3, weight_decay=0.1, fused=False)
    opt.step()

    def size(t: torch.Tensor) -> int:
        return t.numel() * t.element_size()

    params = list(model.parameters())
    states = [v for st in opt.state.values() for k, v in st.items() if k != "step"]
    steps = [v for st in opt.state.values() for k, v in st.items() if k == "step"]
    return {
        "parameters": sum(size(p) for p in params),
        "gradients": sum(size(p.grad) for p in params if p.grad is not None),
        "optimizer": sum(size(v) for v in states),
        "step_counters": sum(size(v) for v in steps),
        "count": sum(p.numel() for p in params),
    }


def activation_peak(model_fields: dict[str, Any], *, batch: int, activation_checkpointing: bool) -> tuple[int, int]:
    """(measured peak bytes, estimated activation bytes) of one fp32 forward and backward."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from config.training import Training
    from sizing.training import memory_per_gpu
    from workloads.common.model import build, config_from_dict

    t = Training.model_validate(
        {
            "model": model_fields,
            "sharding": "ddp",
            "precision": "fp32",
            "batch_size_per_worker": batch,
            "activation_checkpointing": activation_checkpointing,
        }
    )
    torch.manual_seed(0)
    model = build(config_from_dict(t.model.architecture()))
    model.activation_checkpointing = activation_checkpointing
    model.train()
    s = t.model.block_size
    x = torch.randint(0, 256, (batch, s))
    y = torch.randint(0, 256, (batch, s))
    _, loss = model(x, y, logits=False)  # as the job's train_step
    assert loss is not None
    loss.backward()  # the gradients exist from here: the measured step accumulates into them
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        _, loss = model(x, y, logits=False)
        assert loss is not None
        loss.backward()
    assert prof.profiler is not None
    events = sorted(
        (e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"), key=lambda e: e.start_ns()
    )
    live = peak = 0
    for e in events:
        live += e.nbytes()
        peak = max(peak, live)
    est = memory_per_gpu(t, 1)
    return peak, round(est["activations"] + est["loss"])


def main() -> int:
    from config.training import PRESETS, Training
    from sizing.training import memory_per_gpu

    print("| preset | parameters | parameter, gradient, AdamW bytes (meta model) | estimate | equal |")
    print("| --- | --- | --- | --- | --- |")
    for name in PRESETS:
        got = exact_bytes(name)
        est = memory_per_gpu(Training.model_validate({"model": {"preset": name}, "sharding": "ddp"}), 1)
        triple = (got["parameters"], got["gradients"], got["optimizer"])
        want = (round(est["parameters"]), round(est["gradients"]), round(est["optimizer"]))
        print(f"| {name} | {got['count']:,} | {triple} | {want} | {triple == want} |")
    print()
    print("| shape | activation checkpointing | measured peak | estimate | estimate / measured |")
    print("| --- | --- | --- | --- | --- |")
    for label, fields in SHAPES.items():
        for ac in (False, True):
            peak, guess = activation_peak(fields, batch=BATCH, activation_checkpointing=ac)
            print(
                f"| {label}, batch {BATCH} | {str(ac).lower()} | {peak / 2**20:.2f} MiB | {guess / 2**20:.2f} MiB "
                f"| {guess / peak:.2f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
