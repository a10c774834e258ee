"""The token reader (workloads/common/token_windows.py) over a generated corpus of random uint16
shards: RSS growth of a worker reading a whole epoch, and its tokens/s against what one
production step consumes per worker.

Each reader runs in a fresh subprocess: it opens the dataset, reads one batch (warm-up), resets
the kernel's peak-RSS counter (``/proc/self/clear_refs``), reads every window of the epoch in
global batches of ``batch_size_per_worker`` (world size 1, so this one worker touches the whole
corpus), and reports the peak RSS (``VmHWM``) minus the RSS before, and the tokens/s. The same
loop over ``numpy.memmap`` views is the comparison that shows why the reader uses ``pread``:
mapped pages that were read count in RSS.

Production need: ``training.batch_size_per_worker * block_size`` tokens per worker per step
(config/prod.yaml through the config loader) over the plan's estimated step time
(``sizing.plan.plan_of(env).checkpoint.step_seconds``).

    .venv/bin/python bench/token_reader.py            # 256 MiB corpus, seconds
    .venv/bin/python bench/token_reader.py --full     # 1 GiB corpus
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from workloads.common import token_shards as ts  # noqa: E402
from workloads.common.token_shards import Manifest, SplitInfo, TokenizerInfo  # noqa: E402

SHARD_TOKENS = 1 << 25  # 64 MiB of uint16


def production_need(env: str = "prod") -> dict[str, float]:
    """Tokens per worker per step and the estimated step time of ``env``'s training job."""
    from config import load_environment
    from manifests import registry

    cfg = load_environment(env)
    assert cfg.training is not None
    tokens = cfg.training.batch_size_per_worker * cfg.training.model.block_size
    checkpoint = registry.plan_of(cfg).checkpoint
    step = checkpoint.step_seconds if checkpoint is not None else None
    if step is None:
        raise SystemExit(f"{env}: the plan has no estimated step time")
    return {
        "batch_size_per_worker": cfg.training.batch_size_per_worker,
        "block_size": cfg.training.model.block_size,
        "tokens_per_step": tokens,
        "step_seconds": step,
        "tokens_per_s": tokens / step,
    }


def generate(directory: Path, total_bytes: int, seed: int = 0) -> Path:
    """Random uint16 train shards (vocab 50000) of ``total_bytes`` and their manifest."""
    rng = np.random.default_rng(seed)
    writer = ts.ShardWriter(directory, "train", np.dtype(np.uint16), SHARD_TOKENS)
    left = total_bytes // 2
    while left:
        n = min(left, 1 << 24)
        writer.append(rng.integers(0, 50000, n, dtype=np.uint16))
        left -= n
    tok = TokenizerInfo("bench", "00" * 32, 50000, 0, None)
    ts.write_manifest(
        Manifest(directory, np.dtype(np.uint16), SHARD_TOKENS, tok, {"train": SplitInfo(tuple(writer.close()), 0)})
    )
    return directory


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(field)


def _child(directory: str, block_size: int, per_rank: int, mode: str) -> dict[str, float]:
    from workloads.common.token_windows import TokenWindows
    from workloads.training.data import DataPosition

    data = TokenWindows(directory, block_size=block_size, seed=1)
    if mode == "memmap":
        maps = [np.memmap(Path(directory) / s.name, dtype=np.uint16, mode="r") for s in data._shards]
        ends = data._ends

        def read(windows: np.ndarray) -> np.ndarray:
            shard = np.searchsorted(ends, windows, side="right")
            local = windows - np.where(shard > 0, ends[np.maximum(shard - 1, 0)], 0)
            return np.stack(
                [maps[s][w * block_size : w * block_size + block_size + 1] for s, w in zip(shard, local, strict=True)]
            ).astype(np.int64)

        data.read = read  # type: ignore[method-assign]
    pos = DataPosition()
    data.next_batch(pos, rank=0, world_size=1, batch_size=per_rank)
    pos = DataPosition()
    Path("/proc/self/clear_refs").write_text("5")
    before = _status("VmRSS")
    steps = data.num_windows // per_rank
    t0 = time.perf_counter()
    for _ in range(steps):
        data.next_batch(pos, rank=0, world_size=1, batch_size=per_rank)
    seconds = time.perf_counter() - t0
    return {
        "rss_growth": _status("VmHWM") - before,
        "tokens_per_s": steps * per_rank * block_size / seconds,
        "seconds": seconds,
        "windows": steps * per_rank,
    }


def measure(directory: Path, block_size: int, per_rank: int, mode: str) -> dict[str, float]:
    code = (
        f"import json, sys; sys.path.insert(0, {str(ROOT)!r}); from bench.token_reader import _child; "
        f"print(json.dumps(_child({str(directory)!r}, {block_size}, {per_rank}, {mode!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def run(total_bytes: int, workdir: str | None, memmap: bool = True) -> dict[str, float]:
    need = production_need()
    block, per_rank = int(need["block_size"]), int(need["batch_size_per_worker"])
    with tempfile.TemporaryDirectory(dir=workdir, prefix="token-reader-") as tmp:
        directory = generate(Path(tmp), total_bytes)
        reader = measure(directory, block, per_rank, "pread")
        mapped = measure(directory, block, per_rank, "memmap") if memmap else None
    out = {
        "corpus_mib": total_bytes / 2**20,
        "reader_rss_growth_mib": reader["rss_growth"] / 2**20,
        "reader_tokens_per_s": reader["tokens_per_s"],
        "reader_seconds": reader["seconds"],
        "prod_tokens_per_worker_step": need["tokens_per_step"],
        "prod_step_seconds": need["step_seconds"],
        "prod_tokens_per_worker_s": need["tokens_per_s"],
        "speed_ratio": reader["tokens_per_s"] / need["tokens_per_s"],
    }
    if mapped is not None:
        out["memmap_rss_growth_mib"] = mapped["rss_growth"] / 2**20
        out["memmap_tokens_per_s"] = mapped["tokens_per_s"]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--full", action="store_true", help="a 1 GiB corpus (default 256 MiB)")
    p.add_argument("--dir", help="where to generate the corpus (default: the system temp dir)")
    p.add_argument("--no-memmap", action="store_true", help="skip the memmap comparison")
    a = p.parse_args(argv)
    r = run((1 << 30) if a.full else (256 << 20), a.dir, memmap=not a.no_memmap)
    print(json.dumps(r, indent=1))
    line = (
        f"reader over {r['corpus_mib']:.0f} MiB of tokens: RSS growth {r['reader_rss_growth_mib']:.1f} MiB "
        f"(goal <= 64), {r['reader_tokens_per_s'] / 1e6:.2f} M tokens/s vs prod need "
        f"{r['prod_tokens_per_worker_s']:.0f} tokens/s per worker ({r['prod_tokens_per_worker_step']:.0f} tokens "
        f"per {r['prod_step_seconds']:.2f} s step): ratio {r['speed_ratio']:.0f}x (goal >= 100)"
    )
    if "memmap_rss_growth_mib" in r:
        line += f"; memmap reading the same windows: RSS growth {r['memmap_rss_growth_mib']:.0f} MiB"
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
