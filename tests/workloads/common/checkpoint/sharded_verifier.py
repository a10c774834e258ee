"""One rank of a restart's checkpoint search without Ray (a process per rank, gloo): what the
verification tests run. ``python tests/workloads/common/checkpoint/sharded_verifier.py RANK WORLD PORT
STORAGE RUN OUT [N_LAYER]`` (``{}`` in OUT: the rank)``: builds the FSDP2 model of ``sharded_saver.py`` (``N_LAYER``
layers, its default when absent), finds the newest checkpoint with
``checkpoint.find_latest_valid_sharded``, loads it, and writes to ``OUT`` the step found, the
bytes this process hashed (counted at hashlib, under the checkpoint module), the files it
verified per checkpoint, the step loaded, or the error raised."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import types


class _Counted:
    """sha256 that adds every byte it hashes to ``total``."""

    total = 0

    def __init__(self) -> None:
        self.sha = hashlib.sha256()

    def update(self, data: bytes) -> None:
        _Counted.total += memoryview(data).nbytes
        self.sha.update(data)

    def hexdigest(self) -> str:
        return self.sha.hexdigest()


class _Verified(logging.Handler):
    """The files each rank logs as verified, per checkpoint path."""

    def __init__(self) -> None:
        super().__init__()
        self.files: dict[str, list[str]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        if "verified" in str(record.msg) and record.args and isinstance(record.args, tuple):
            path, _, names = record.args[:3]
            self.files[os.path.basename(str(path))] = [] if names == "no shard" else str(names).split(", ")


def main() -> None:
    rank, world, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    storage, run, out = sys.argv[4], sys.argv[5], sys.argv[6].format(rank)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.fsdp import fully_shard

    from workloads.common import checkpoint as ck
    from workloads.common.checkpoint import integrity
    from workloads.common.model import Llama, LlamaConfig

    integrity.hashlib = types.SimpleNamespace(sha256=_Counted)  # type: ignore[assignment]
    verified = _Verified()
    logging.getLogger("workloads.checkpoint").addHandler(verified)
    logging.getLogger("workloads.checkpoint").setLevel(logging.INFO)

    dist.init_process_group("gloo", rank=rank, world_size=world)
    config = LlamaConfig() if len(sys.argv) <= 7 else LlamaConfig(n_layer=int(sys.argv[7]))
    model = Llama(config)
    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd, "progress": {"step": 0}}
    group = dist.new_group(backend="gloo")
    result: dict[str, object] = {"rank": rank}
    try:
        found = ck.find_latest_valid_sharded(storage, run, state, process_group=group)
        result["hashed_bytes"] = _Counted.total
        result["step"] = None if found is None else found.step
        if found is not None:
            ck.load_sharded(found.path, state, process_group=group)
            result["loaded_step"] = state["progress"]["step"]
    except ck.CheckpointError as err:
        result["error"] = str(err)
    result["verified"] = verified.files
    with open(out, "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
