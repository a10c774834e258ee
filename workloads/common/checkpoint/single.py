"""The single-writer checkpoint layout: one ``torch.save`` file per entry of ``state``,
``meta.json``, then ``manifest.json`` (integrity.py reads and verifies it). One process writes it
(the serving rehearsals and benchmarks make their checkpoints so); the training job writes the
sharded layout (sharded.py).

Every file is fsynced, its size and sha256 taken while it is written; the manifest goes last,
via a temporary name and an atomic rename.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import IO, TYPE_CHECKING, Any, cast

import torch

from workloads.common.checkpoint.integrity import FORMAT, MANIFEST, META, fsync_write

if TYPE_CHECKING:
    from typing_extensions import Buffer

_KICK = 4 << 20  # bytes between early background fsyncs while saving


class _HashingFile:
    """A file that takes its sha256 while it is written and pushes its data to disk early: every
    ``_KICK`` bytes an fsync starts on a background thread, so the disk writes while the CPU
    serializes and hashes the rest; ``close`` waits only for the tail."""

    def __init__(self, path: str, pool: ThreadPoolExecutor):
        self.f = open(path, "wb")  # noqa: SIM115 (owned by this writer, closed in close())
        self.fd = self.f.fileno()
        self.sha = hashlib.sha256()
        self.size = 0
        self.unsynced = 0
        self.pool = pool
        self.pending: concurrent.futures.Future[None] | None = None

    def write(self, data: Buffer) -> int:
        view = memoryview(data).cast("B")
        self.sha.update(view)
        self.f.write(view)
        n = view.nbytes
        self.size += n
        self.unsynced += n
        if self.unsynced >= _KICK and (self.pending is None or self.pending.done()):
            self.f.flush()
            self.pending = self.pool.submit(os.fsync, self.fd)
            self.unsynced = 0
        return n

    def flush(self) -> None:
        self.f.flush()

    def close(self) -> dict[str, Any]:
        self.f.flush()
        if self.pending is not None:
            self.pending.result()
        os.fsync(self.fd)
        self.f.close()
        return {"size": self.size, "sha256": self.sha.hexdigest()}


def save(directory: str, state: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    """Write ``state`` (one ``<name>.pt`` per entry), ``meta.json``, then ``manifest.json``.

    ``meta`` must be JSON-serializable and hold ``"step"`` (int). Every file is fsynced; its
    size and sha256 are taken while it is written; the manifest goes last, via a temporary
    name and an atomic rename.
    """
    if "step" not in meta:
        raise ValueError("checkpoint meta must hold 'step'")
    os.makedirs(directory, exist_ok=True)
    files: dict[str, dict[str, Any]] = {}
    with ThreadPoolExecutor(max_workers=1) as pool:
        for name, obj in state.items():
            out = _HashingFile(os.path.join(directory, f"{name}.pt"), pool)
            try:
                # torch.save writes to any object with write and flush; its annotation names IO[bytes].
                torch.save(obj, cast("IO[bytes]", out))
            finally:
                files[f"{name}.pt"] = out.close()
    meta_bytes = json.dumps(meta, sort_keys=True, indent=1).encode()
    fsync_write(os.path.join(directory, META), meta_bytes)
    files[META] = {"size": len(meta_bytes), "sha256": hashlib.sha256(meta_bytes).hexdigest()}
    manifest = {
        "format": FORMAT,
        "step": int(meta["step"]),
        "created_unix": time.time(),
        "files": dict(sorted(files.items())),
    }
    tmp = os.path.join(directory, f".{MANIFEST}.tmp")
    fsync_write(tmp, json.dumps(manifest, indent=1).encode())
    os.replace(tmp, os.path.join(directory, MANIFEST))
    # The rename itself is durable only once the directory is synced.
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return manifest
