"""Training text as byte tokens, and a resumable position in it.

Each worker builds its own data: it reads the same corpus, cuts it into windows of
``block_size + 1`` bytes, and walks a seeded permutation of them, one global batch per step,
taking the slice of its rank. The position (epoch, cursor) goes into every checkpoint, so a
resumed run reads exactly the batches an uninterrupted run would have read.
"""

from __future__ import annotations

import os
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from workloads.common import storage

_SKIP_PARTS = {"site-packages", "dist-packages", "__pycache__", "test", "tests", "idlelib"}


def stdlib_sources() -> list[Path]:
    """The Python standard library's own .py files, sorted: present on every machine and image."""
    return list(_stdlib_walk(Path(sysconfig.get_paths()["stdlib"])))


def _stdlib_walk(directory: Path) -> Iterator[Path]:
    """The .py files under ``directory`` in sorted path order (``sorted(Path.rglob("*.py"))``),
    lazily, without entering the skipped directories: the stdlib directory also holds the
    interpreter's site-packages, tens of thousands of files that every worker would otherwise
    list at start. As ``rglob``, it does not enter symlinked or unreadable directories."""
    try:
        with os.scandir(directory) as it:
            entries = sorted(it, key=lambda e: e.name)
    except PermissionError:
        return
    for entry in entries:
        if entry.name in _SKIP_PARTS:
            continue
        if entry.is_dir(follow_symlinks=False):
            yield from _stdlib_walk(Path(entry.path))
        elif entry.name.endswith(".py"):
            yield Path(entry.path)


def load_corpus(data_path: str | None, max_bytes: int) -> bytes:
    """At most ``max_bytes`` of text: the stdlib sources (None), or a file/directory at a POSIX
    path or s3:// URI (files in sorted order)."""
    chunks: list[bytes] = []
    total = 0
    if data_path is None:
        # Walked lazily: a 4 MiB corpus reads the first files in sorted order, it lists no more.
        for path in _stdlib_walk(Path(sysconfig.get_paths()["stdlib"])):
            data = path.read_bytes()
            chunks.append(data)
            total += len(data)
            if total >= max_bytes:
                break
    else:
        import pyarrow.fs as pafs

        fs, base = storage.filesystem_for(data_path)
        info = fs.get_file_info(base)
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(f"training.data_path {data_path!r} does not exist")
        if info.type == pafs.FileType.File:
            files = [base]
        else:
            files = sorted(
                i.path
                for i in fs.get_file_info(pafs.FileSelector(base, recursive=True))
                if i.type == pafs.FileType.File
            )
        for name in files:
            with fs.open_input_stream(name) as f:
                data = f.read(max_bytes - total)
            chunks.append(data)
            total += len(data)
            if total >= max_bytes:
                break
    corpus = b"".join(chunks)[:max_bytes]
    if len(corpus) < 1024:
        raise ValueError(f"training data {data_path or 'stdlib'}: only {len(corpus)} bytes of text")
    return corpus


@dataclass
class DataPosition:
    """Where the run is in the data: the epoch and the next window index in its permutation."""

    epoch: int = 0
    cursor: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "cursor": self.cursor}


class ByteWindows:
    def __init__(self, corpus: bytes, block_size: int, seed: int):
        self.tokens = torch.frombuffer(bytearray(corpus), dtype=torch.uint8).long()
        self.block_size = block_size
        self.seed = seed
        self.num_windows = (len(self.tokens) - 1) // block_size
        self._perm_epoch = -1
        self._perm = torch.empty(0, dtype=torch.long)

    def _permutation(self, epoch: int) -> torch.Tensor:
        if epoch != self._perm_epoch:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self._perm = torch.randperm(self.num_windows, generator=g)
            self._perm_epoch = epoch
        return self._perm

    def next_batch(
        self, pos: DataPosition, *, rank: int, world_size: int, batch_size: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's (inputs, targets) for the step at ``pos``; advances ``pos`` by one global batch."""
        global_batch = batch_size * world_size
        if global_batch > self.num_windows:
            raise ValueError(f"global batch {global_batch} exceeds the {self.num_windows} windows of the corpus")
        if pos.cursor + global_batch > self.num_windows:
            pos.epoch, pos.cursor = pos.epoch + 1, 0
        perm = self._permutation(pos.epoch)
        start = pos.cursor + rank * batch_size
        idx = perm[start : start + batch_size]
        offsets = idx[:, None] * self.block_size + torch.arange(self.block_size + 1)
        windows = self.tokens[offsets]
        pos.cursor += global_batch
        return windows[:, :-1], windows[:, 1:]
