"""Checkpoints: one directory per checkpoint, ``<storage>/<run_name>/checkpoint_<step:09d>/``,
with an integrity manifest written last. By concern:

- integrity.py: the format and its verification (manifest, digests, ``verify``, ``load``,
  ``list_checkpoints``, ``load_latest_valid``), for both layouts.
- sharded.py: the training job's layout (torch.distributed.checkpoint): ``ShardWriter``,
  ``save_sharded``, ``load_sharded`` and the spread verification of a resume,
  ``find_latest_valid_sharded``.
- single.py: the single-writer layout (``save``), one ``torch.save`` file per entry.

The serving replica's loader (one entry straight into preallocated tensors) is
workloads/inference/loading.py's ``load_entry_into``.

Stable API (the training job and the inference app both use it), importable from here:

- ``save(directory, state, meta) -> dict``: write a single-writer checkpoint into a local
  directory; returns the manifest.
- ``verify(path, filesystem=None) -> list[str]``: the problems found (empty: intact).
- ``load(path, filesystem=None, map_location="cpu", keys=None) -> LoadedCheckpoint``: verify and
  load; raises ``CheckpointError`` when torn.
- ``save_sharded(directory, state, meta, process_group=None, writer_cls=ShardWriter) -> Future``:
  every rank calls it (collective); ``dcp.async_save`` stages ``state`` and writes in the
  background; the future is done once the manifest is written.
- ``load_sharded(path, state, process_group=None)``: fill ``state`` in place from a verified
  sharded checkpoint (DCP reshards to the current world size).
- ``find_latest_valid_sharded(storage, run_name, state, process_group=None)
  -> LoadedCheckpoint | None``: every rank calls it (collective); the newest checkpoint that
  every rank found intact, each rank hashing the shard files it will read for ``state``.
- ``list_checkpoints(storage, run_name) -> list[(step, path)]``, newest first.
- ``load_latest_valid(storage, run_name, map_location="cpu", keys=None)
  -> LoadedCheckpoint | None``: the newest intact checkpoint of a run (None when the run has
  none), logging which one it used and every one it skipped.

``storage`` is a POSIX path (``/fsx/checkpoints``, a local directory) or ``s3://bucket/prefix``.
"""

from __future__ import annotations

from workloads.common.checkpoint.integrity import (
    DIR_RE,
    FORMAT,
    MANIFEST,
    META,
    SHARDED_FORMAT,
    CheckpointError,
    LoadedCheckpoint,
    dir_name,
    list_checkpoints,
    load,
    load_latest_valid,
    verify,
)
from workloads.common.checkpoint.sharded import (
    ShardWriter,
    assign_files,
    files_read,
    find_latest_valid_sharded,
    load_sharded,
    save_sharded,
)
from workloads.common.checkpoint.single import save

__all__ = [
    "DIR_RE",
    "FORMAT",
    "MANIFEST",
    "META",
    "SHARDED_FORMAT",
    "CheckpointError",
    "LoadedCheckpoint",
    "ShardWriter",
    "assign_files",
    "dir_name",
    "files_read",
    "find_latest_valid_sharded",
    "list_checkpoints",
    "load",
    "load_latest_valid",
    "load_sharded",
    "save",
    "save_sharded",
    "verify",
]
