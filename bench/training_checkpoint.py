"""Checkpoint write throughput vs a raw write (with fsync) of the same bytes to the same
filesystem, measured in one run.

The checkpoint is the real thing (model, AdamW state, scheduler, RNG of a GPT) written by
`workloads.common.checkpoint.save` (serialize, sha256, fsync, manifest last). The raw write
is the same serialized bytes written and fsynced to the same directory. Runs interleave; the
median of `--repeats` is reported. The step-time stall from asynchronous checkpoints is
measured by bench/training_throughput.py (same run: with vs without checkpoints).

    python bench/training_checkpoint.py [--dir DIR] [--n-embd 512] [--repeats 5]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main(argv: list[str] | None = None) -> int:
    import torch

    from workloads.common import checkpoint as ckpt
    from workloads.common.model import GPT, GPTConfig

    p = argparse.ArgumentParser()
    p.add_argument("--dir", default=None, help="filesystem to test (default: a temp dir under the repo's out/)")
    p.add_argument("--n-embd", type=int, default=512)
    p.add_argument("--n-layer", type=int, default=6)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", default=str(REPO / "out" / "bench" / "training_checkpoint.json"))
    args = p.parse_args(argv)

    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=args.n_layer, n_head=8, n_embd=args.n_embd, block_size=256))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, 256, (2, 64))
    _, loss = model(x, x)
    assert loss is not None, "targets given"
    loss.backward()
    opt.step()
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "rng": [torch.get_rng_state()]}
    blobs = {}
    for k, v in state.items():
        buf = io.BytesIO()
        torch.save(v, buf)
        blobs[k] = buf.getvalue()
    total = sum(map(len, blobs.values()))
    base = Path(args.dir) if args.dir else REPO / "out" / "bench"
    base.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="ckpt-bench-", dir=base))
    print(
        f"checkpoint of {model.num_parameters() / 1e6:.1f}M parameters: {total / 2**20:.0f} MiB, on {root}", flush=True
    )

    def raw(i: int) -> float:
        d = root / f"raw{i}"
        d.mkdir()
        t = time.perf_counter()
        for k, data in blobs.items():
            with open(d / f"{k}.pt", "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        return time.perf_counter() - t

    def real(i: int) -> float:
        d = root / f"ckpt{i}"
        t = time.perf_counter()
        ckpt.save(str(d), state, meta={"step": i})
        return time.perf_counter() - t

    raws, reals = [], []
    try:
        for i in range(args.repeats):
            raws.append(raw(i))
            reals.append(real(i))
            assert ckpt.verify(str(root / f"ckpt{i}")) == []
            shutil.rmtree(root / f"raw{i}")
            shutil.rmtree(root / f"ckpt{i}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    r, c = statistics.median(raws), statistics.median(reals)
    ratio = r / c
    print(f"raw write+fsync : {total / r / 2**20:8.1f} MiB/s (median of {args.repeats})")
    print(f"checkpoint.save : {total / c / 2**20:8.1f} MiB/s (serialize + sha256 + fsync + manifest)")
    print(f"ratio checkpoint/raw: {ratio:.3f} (goal >= 0.8)")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(
        json.dumps({"bytes": total, "raw_s": raws, "checkpoint_s": reals, "ratio": ratio}, indent=2)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
