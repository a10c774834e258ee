"""One rank of a sharded save without Ray (a process per rank, gloo): what the checkpoint tests
tear, truncate and kill. ``python tests/workloads/common/checkpoint/sharded_saver.py RANK WORLD PORT DIR
STEPS [SLOW_RANK]``: saves a small FSDP2 model after each step in STEPS; with SLOW_RANK that rank
waits before writing its shard of the last save, so the test can kill it mid-save."""

from __future__ import annotations

import os
import sys
import time


def main() -> None:
    rank, world, port, directory = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    steps = [int(x) for x in sys.argv[5].split(",")]
    slow_rank = int(sys.argv[6]) if len(sys.argv) > 6 else None
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.fsdp import fully_shard

    from workloads.common import checkpoint as ck
    from workloads.common.model import Llama, LlamaConfig

    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = Llama(LlamaConfig())
    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    class SlowWriter(ck.ShardWriter):
        def write_data(self, plan, planner):
            if dist.get_rank() == slow_rank:
                print("SLOW", flush=True)
                time.sleep(120)
            return super().write_data(plan, planner)

    group = dist.new_group(backend="gloo")
    for i, step in enumerate(steps):
        x = torch.randint(0, 256, (2, 16))
        model(x, x)[1].backward()
        optimizer.step()
        model_sd, optim_sd = get_state_dict(model, optimizer)
        last = i == len(steps) - 1
        writer = SlowWriter if (last and slow_rank is not None) else ck.ShardWriter
        future = ck.save_sharded(
            os.path.join(directory, ck.dir_name(step)),
            {"model": model_sd, "optim": optim_sd, "progress": {"step": step}},
            {"step": step, "world_size": world},
            process_group=group,
            writer_cls=writer,
        )
        future.result()
        print(f"SAVED {step}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
