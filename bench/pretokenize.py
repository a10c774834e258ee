"""The pretokenize job (workloads/pretokenize) on a local Ray cluster with 2 tokenizer workers
against one process doing the same work (``run(..., local=True)``: the same reading, tokenizing,
part files and packing, without Ray), on the same generated corpus and a BPE tokenizer trained
here. Both outputs must be the same dataset (shard digests compared).

Where the time goes: Ray's start (separately), the tokenize phase (reading, BPE, writing part
files) and the pack phase (shards + digests), and, in one process, the BPE encode alone over the
same documents. The ``tokenizers`` library's ``encode_batch`` runs on several threads by itself
(Rayon), so with its default the one-process baseline already uses every core it may and Ray's
workers share the cores with each other's threads; ``--threads 1`` (``RAYON_NUM_THREADS``, set
before the library starts its pool, inherited by Ray's workers) compares one core per worker.
The load average is printed: on a shared machine the ratio is only as good as the quiet.

    .venv/bin/python bench/pretokenize.py            # ~8 MiB of JSON Lines, seconds
    .venv/bin/python bench/pretokenize.py --full     # ~64 MiB
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rigs.bpe import stdlib_texts, train_bpe  # noqa: E402
from workloads.pretokenize.inputs import read_documents  # noqa: E402
from workloads.pretokenize.pipeline import PretokenizeConfig, run  # noqa: E402


def write_corpus(directory: Path, docs: list[str], total_bytes: int, files: int) -> int:
    """JSON Lines files of stdlib modules (repeated, each copy tagged so every document differs)."""
    directory.mkdir(parents=True)
    per_file, written = total_bytes // files, 0
    i = 0
    for f in range(files):
        size = 0
        with open(directory / f"part-{f:03d}.jsonl", "w") as out:
            while size < per_file:
                text = f"# copy {i}\n" + docs[i % len(docs)]
                line = json.dumps({"text": text}) + "\n"
                out.write(line)
                size += len(line)
                i += 1
        written += size
    return written


def bench(total_bytes: int, files: int, workers: int) -> dict[str, float]:
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    docs = stdlib_texts()
    with tempfile.TemporaryDirectory(prefix="pretokenize-bench-") as tmp:
        t = Path(tmp)
        tok = train_bpe(t / "tokenizer.json", texts=docs[:100], vocab_size=8000)
        corpus_bytes = write_corpus(t / "in", docs, total_bytes, files)

        def cfg(out: str) -> PretokenizeConfig:
            return PretokenizeConfig(
                input=str(t / "in"), output=str(t / out), tokenizer=str(tok), shard_tokens=1 << 22, workers=workers
            )

        one: dict[str, float] = {}
        t0 = time.perf_counter()
        m1 = run(cfg("one"), log=lambda s: None, local=True, timings=one)
        one_s = time.perf_counter() - t0

        from workloads.common.tokenizer import load_tokenizer

        hf = load_tokenizer(tok)
        t0 = time.perf_counter()
        for f in sorted((t / "in").iterdir()):
            for batch in read_documents(str(f), "jsonl", "text", 1024):
                hf.encode_batch(batch)
        encode_s = time.perf_counter() - t0

        t0 = time.perf_counter()
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
        ray_start_s = time.perf_counter() - t0
        try:
            from ray.data import DataContext

            DataContext.get_current().enable_progress_bars = False
            on_ray: dict[str, float] = {}
            t0 = time.perf_counter()
            m2 = run(cfg("ray"), log=lambda s: None, timings=on_ray)
            ray_s = time.perf_counter() - t0
        finally:
            ray.shutdown()
        same = [s.sha256 for s in m1.shards()] == [s.sha256 for s in m2.shards()]
    return {
        "corpus_mib": corpus_bytes / 2**20,
        "input_files": files,
        "tokens": m1.total_tokens,
        "same_dataset": float(same),
        "one_process_s": one_s,
        "one_process_tokenize_s": one["tokenize"],
        "one_process_pack_s": one["pack"],
        "encode_only_s": encode_s,
        "ray_start_s": ray_start_s,
        "ray_workers": workers,
        "ray_s": ray_s,
        "ray_tokenize_s": on_ray["tokenize"],
        "ray_pack_s": on_ray["pack"],
        "speedup": one_s / ray_s,
        "speedup_with_start": one_s / (ray_s + ray_start_s),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--full", action="store_true", help="~64 MiB in 16 files (default ~8 MiB in 8)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument(
        "--threads", type=int, help="tokenizer threads per process (RAYON_NUM_THREADS; default: the library's)"
    )
    a = p.parse_args(argv)
    if a.threads is not None:
        os.environ["RAYON_NUM_THREADS"] = str(a.threads)
    load_before = os.getloadavg()[0]
    total, files = ((64 << 20), 16) if a.full else ((8 << 20), 8)
    r = bench(total, files, a.workers)
    r["load_average_before"], r["load_average_after"] = load_before, os.getloadavg()[0]
    r["threads"] = float(a.threads or 0)
    print(json.dumps(r, indent=1))
    print(
        f"threads {a.threads or 'default'}, load average {load_before:.1f} -> {r['load_average_after']:.1f}: "
        f"pretokenize {r['corpus_mib']:.0f} MiB ({r['tokens']:.0f} tokens): one process {r['one_process_s']:.1f} s "
        f"(tokenize {r['one_process_tokenize_s']:.1f}, of which BPE encode {r['encode_only_s']:.1f}; pack "
        f"{r['one_process_pack_s']:.2f}); Ray, {a.workers} workers {r['ray_s']:.1f} s (tokenize "
        f"{r['ray_tokenize_s']:.1f}, pack {r['ray_pack_s']:.2f}) + start {r['ray_start_s']:.1f} s; speedup "
        f"{r['speedup']:.2f}x ({r['speedup_with_start']:.2f}x with the start); same dataset: {bool(r['same_dataset'])}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
