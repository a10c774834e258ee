"""One rank of the meta-device initialisation checks (a process per rank, gloo, no Ray).
``python tests/workloads/training/meta_init_rank.py RANK WORLD PORT MODEL_JSON``: builds the
model as the job does under FSDP (``build_model``: meta device, ``fully_shard``, ``to_empty``,
``init_parameters``), then the whole model the old way (``torch.manual_seed``; ``build``), and
prints one JSON line: whether every gathered parameter and buffer is bitwise the whole model's,
the bytes this rank holds, and its anonymous resident memory (``RssAnon``: the tensors, not the
library code pages a loaded machine may evict and fault in again) before, at the peak of the
sharded initialisation, and at the peak after the whole build, sampled every millisecond."""

from __future__ import annotations

import json
import os
import sys
import threading
import time


def rss_bytes() -> int:
    """This process's anonymous resident memory (/proc/self/status RssAnon)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon in /proc/self/status")


class Peak:
    """The highest ``rss_bytes()`` seen since the last ``reset``, sampled every millisecond."""

    def __init__(self) -> None:
        self.value = rss_bytes()
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while True:
            self.value = max(self.value, rss_bytes())
            time.sleep(0.001)

    def reset(self) -> None:
        self.value = rss_bytes()

    def read(self) -> int:
        time.sleep(0.005)  # one more sample after the phase
        return self.value


def main() -> None:
    rank, world, port, model = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    from workloads.common.model import build, config_from_dict
    from workloads.training.parallelize import build_model

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    config = config_from_dict(model)
    # Warm-up on the smallest model: FSDP's and DTensor's lazy set-up is not part of the measure.
    build_model(
        config_from_dict({"arch": "llama"}),
        seed=0,
        sharding="fsdp",
        device=torch.device("cpu"),
        precision="fp32",
        activation_checkpointing=False,
    )
    peak = Peak()
    before = rss_bytes()
    peak.reset()
    sharded = build_model(
        config, seed=1234, sharding="fsdp", device=torch.device("cpu"), precision="fp32", activation_checkpointing=False
    )
    sharded_peak = peak.read()
    held = sum(p.to_local().numel() * p.element_size() for p in sharded.parameters())
    torch.manual_seed(1234)
    whole = build(config)
    whole_peak = peak.read()
    same = []
    for name, p in sharded.named_parameters():
        full = p.full_tensor() if isinstance(p, DTensor) else p
        same.append(bool(torch.equal(full, whole.get_parameter(name))))
    for name, b in sharded.named_buffers():
        same.append(bool(torch.equal(b, whole.get_buffer(name))))
    full_bytes = sum(p.numel() * p.element_size() for p in whole.parameters())
    print(
        json.dumps(
            {
                "rank": rank,
                "bitwise": all(same) and len(same) > 0,
                "held": held,
                "full": full_bytes,
                "before": before,
                "sharded_peak": sharded_peak,
                "whole_peak": whole_peak,
            }
        ),
        flush=True,
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
