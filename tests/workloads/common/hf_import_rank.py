"""One rank of the sharded Hugging Face import checks (a process per rank, gloo, no Ray).
``python tests/workloads/common/hf_import_rank.py RANK WORLD PORT FOLDER[,FOLDER...] WARMUP_FOLDER``: builds
the platform's Llama of FOLDER's config.json on the meta device, shards it with FSDP2
(``fully_shard`` per block and at the root over a CPU mesh), allocates the shards and imports
FOLDER with ``hf_llama.load_hf_into`` (after the same on WARMUP_FOLDER, so gloo's, FSDP's and
DTensor's lazy set-up is not part of the measure). Prints one JSON line: the digest, the bytes
this rank holds, the largest whole tensor, how far the peak resident set (``VmHWM``, reset just
before allocating the shards) rose above the resident set before, and whether every gathered
parameter is bitwise the one a whole (unsharded) model imports."""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    rank, world, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    folders, warmup = sys.argv[4].split(","), sys.argv[5]
    folder = folders[rank % len(folders)]  # one folder, or one per rank (the mismatch check)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from workloads.common import hf_llama, procfs
    from workloads.common.model import Llama

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    group = dist.new_group(backend="gloo")

    def sharded(path: str) -> tuple[Llama, str]:
        config, _ = hf_llama.read_config(path)
        with torch.device("meta"):
            model = Llama(config)
        for layer in model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        model.to_empty(device="cpu")
        model.reset_buffers()
        digest = hf_llama.load_hf_into(model, path, process_group=group)
        return model, digest

    sharded(warmup)
    before = procfs.rss_kib("self")
    procfs.reset_peak_rss()
    model, digest = sharded(folder)
    growth = (procfs.peak_rss_kib() - before) * 1024
    held = sum(p.to_local().numel() * p.element_size() for p in model.parameters())
    largest = max(p.numel() * p.element_size() for p in model.parameters())  # DTensor: the whole
    full = sum(p.numel() * p.element_size() for p in model.parameters())
    bitwise = None
    if full < 64 << 20:  # the small folders: compare with the whole model, imported unsharded
        whole = Llama(model.config)
        assert hf_llama.load_hf_into(whole, folder) == digest
        same = [torch.equal(p.full_tensor(), whole.get_parameter(name)) for name, p in model.named_parameters()]
        bitwise = all(same) and len(same) > 0
    print(
        json.dumps(
            {
                "rank": rank,
                "digest": digest,
                "held": held,
                "largest": largest,
                "full": full,
                "growth": growth,
                "bitwise": bitwise,
            }
        ),
        flush=True,
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
