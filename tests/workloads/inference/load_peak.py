"""Peak resident memory of a replica's model load, in a process of its own (no Ray).
``python tests/workloads/inference/load_peak.py STORAGE RUN WARMUP_STORAGE``: loads the small
checkpoint of ``RUN`` under ``WARMUP_STORAGE`` first (torch's and DCP's lazy set-up is not part of
the measure), then the one under ``STORAGE`` as a replica does (``loading.load_model``), and prints
one JSON line: the loaded weights' bytes, and how far the peak resident set (``VmHWM``, reset just
before the load) rose above the resident set before it."""

from __future__ import annotations

import json
import sys


def main() -> None:
    storage, run, warmup = sys.argv[1], sys.argv[2], sys.argv[3]
    import torch

    from workloads.common import procfs
    from workloads.inference import loading

    torch.set_num_threads(1)
    loading.load_model(warmup, run)
    before = procfs.rss_kib("self")
    procfs.reset_peak_rss()
    loaded = loading.load_model(storage, run)
    peak = procfs.peak_rss_kib()
    weights = sum(p.numel() * p.element_size() for p in loaded.model.parameters())
    print(json.dumps({"weights": weights, "growth": (peak - before) * 1024}), flush=True)


if __name__ == "__main__":
    main()
