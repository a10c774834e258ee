"""Peak resident memory of an export, in a process of its own (no Ray).
``python tests/workloads/common/hf_export_peak.py CHECKPOINT OUT TOKENIZER MAX_SHARD_BYTES WARMUP_CHECKPOINT``:
exports WARMUP_CHECKPOINT first (torch's and DCP's lazy set-up is not part of the measure), then
CHECKPOINT into OUT with ``hf_llama.export_hf``, and prints one JSON line: how far the peak
resident set (``VmHWM``, reset just before the export) rose above the resident set before it."""

from __future__ import annotations

import json
import sys
import tempfile


def main() -> None:
    checkpoint, out, tokenizer, max_shard, warmup = sys.argv[1:6]
    import torch

    from workloads.common import hf_llama, procfs

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        hf_llama.export_hf(warmup, f"{tmp}/warm", tokenizer_files=[tokenizer], max_shard_bytes=int(max_shard))
    before = procfs.rss_kib("self")
    procfs.reset_peak_rss()
    hf_llama.export_hf(checkpoint, out, tokenizer_files=[tokenizer], max_shard_bytes=int(max_shard))
    growth = (procfs.peak_rss_kib() - before) * 1024
    print(json.dumps({"growth": growth}), flush=True)


if __name__ == "__main__":
    main()
