"""Run a bench's ``worker(rank, world, port, task, out)`` on ``world`` local processes (spawned,
each its own rank of a process group on a free loopback port) and read back the JSON that rank 0
writes to ``out``."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def launch(worker: Callable[..., None], world: int, task: dict[str, Any]) -> dict[str, Any]:
    import torch.multiprocessing as mp

    from rigs.local_cluster import free_port

    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    mp.start_processes(worker, args=(world, free_port(), task, out), nprocs=world, start_method="spawn")
    result: dict[str, Any] = json.loads(Path(out).read_text())
    os.unlink(out)
    return result
