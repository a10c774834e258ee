"""One rank of the ``training.init_from`` checks (a process per rank, gloo, no Ray).
``python tests/workloads/training/init_from_rank.py RANK WORLD PORT FOLDER MODEL_JSON``: builds
the job's model as a fresh start with init_from does (``build_model`` under FSDP with
``initialize=False``), fills it the way ``train_func`` does (``parallelize.initial_weights``
with no resumed checkpoint, over a gloo group of every rank), and prints one JSON line: the
logits of a fixed batch (rank 0), the record the checkpoints' meta gets, the bytes this rank
holds, and what a resumed start (a checkpoint's meta) records for a folder that does not exist."""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    rank, world, port, folder = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    model_fields = json.loads(sys.argv[5])
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch
    import torch.distributed as dist

    from workloads.common.model import config_from_dict
    from workloads.training import parallelize

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    group = dist.new_group(backend="gloo")  # as the Checkpointer's
    config = config_from_dict(model_fields)
    model = parallelize.build_model(
        config,
        seed=1234,
        sharding="fsdp",
        device=torch.device("cpu"),
        precision="fp32",
        activation_checkpointing=False,
        initialize=False,
    )
    try:
        record = parallelize.initial_weights(model, folder, None, process_group=group)
    except ValueError as err:
        print(json.dumps({"rank": rank, "error": str(err)}), flush=True)
        dist.destroy_process_group()
        return
    held = sum(p.to_local().numel() for p in model.parameters())
    x = torch.arange(24).reshape(2, 12) % config.vocab_size
    with torch.no_grad():
        logits, _ = model(x)
    resumed = parallelize.initial_weights(
        model, "/nonexistent/hf-folder", {"step": 10, "init_from": record}, process_group=group
    )
    out = {"rank": rank, "record": record, "held": held, "resumed_record": resumed}
    if rank == 0:
        out["logits"] = logits.tolist()
    print(json.dumps(out), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
