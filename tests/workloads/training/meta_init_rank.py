"""One rank of the meta-device initialisation checks (a process per rank, gloo, no Ray).
``python tests/workloads/training/meta_init_rank.py RANK WORLD PORT MODEL_JSON``: builds the
model as the job does under FSDP (``build_model``: meta device, ``fully_shard``, ``to_empty``,
``init_parameters``), then the whole model the old way (``torch.manual_seed``; ``build``), and
prints one JSON line: whether every gathered parameter and buffer is bitwise the whole model's,
the bytes this rank holds, and its resident memory before, at the peak of the sharded
initialisation, and at the peak after the whole build."""

from __future__ import annotations

import json
import os
import resource
import sys


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main() -> None:
    rank, world, port, model = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    from workloads.common.model import build, config_from_dict
    from workloads.training.job import build_model

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
    before = rss_bytes()
    sharded = build_model(
        config, seed=1234, sharding="fsdp", device=torch.device("cpu"), precision="fp32", activation_checkpointing=False
    )
    sharded_peak = peak_bytes()
    held = sum(p.to_local().numel() * p.element_size() for p in sharded.parameters())
    torch.manual_seed(1234)
    whole = build(config)
    whole_peak = peak_bytes()
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
