"""The sharded checkpoint layout of the training job (torch.distributed.checkpoint), written and
read by every rank::

    __<rank>_0.distcp              every rank's own shards, written by that rank in parallel
    .metadata                      DCP's index of the shards, written by rank 0 after all ranks
    meta.json                      JSON metadata (step, model config, data position, ...)
    manifest.json                  {"format", "step", "files": {name: {"size", "sha256"}}}

Each rank hashes the files it wrote once they are fsynced and leaves the sums in a small side
file; rank 0 writes the manifest from them only after DCP has gathered every rank's write
results (so after every shard is on disk) and after ``.metadata``. On resume every rank verifies
the shard files it will read (``find_latest_valid_sharded``), so a restart's verification does
not grow with one process.

One module because it is one protocol between the ranks: the writer's side file and manifest,
the reader's spread verification and the load, read next to each other.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import logging
import os
import time
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs
from torch.distributed.checkpoint.filesystem import FileSystemWriter

from workloads.common import storage as storage_mod
from workloads.common.checkpoint.integrity import (
    MANIFEST,
    META,
    SHARDED_FORMAT,
    CheckpointError,
    LoadedCheckpoint,
    check,
    check_file,
    digest,
    fsync_dir,
    fsync_write,
    head,
    list_checkpoints,
)

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup
    from torch.distributed.checkpoint.metadata import Metadata
    from torch.distributed.checkpoint.planner import SavePlan, SavePlanner
    from torch.distributed.checkpoint.staging import AsyncStager
    from torch.distributed.checkpoint.storage import WriteResult
    from torch.futures import Future

log = logging.getLogger("workloads.checkpoint")

_SUMS = ".sums-"


class ShardWriter(FileSystemWriter):
    """DCP's file-system writer plus the integrity manifest: each rank hashes the shards it wrote
    (after DCP fsynced them) into a side file; rank 0 (DCP's coordinator, which runs ``finish``
    only after gathering every rank's write results) writes ``.metadata``, ``meta.json`` and then
    the manifest over all of them, atomically."""

    def __init__(self, path: str, meta: dict[str, Any]):
        super().__init__(path, single_file_per_rank=True, sync_files=True, thread_count=1)
        self.directory = str(path)
        self.meta = meta

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        results = super().write_data(plan, planner).wait()
        names = sorted({r.storage_data.relative_path for r in results})
        sums = {name: digest(os.path.join(self.directory, name)) for name in names}
        if names:
            side = os.path.join(self.directory, f"{_SUMS}{names[0]}.json")
            fsync_write(side, json.dumps(sums).encode())
        from torch.futures import Future

        fut: Future[list[WriteResult]] = Future()
        fut.set_result(results)
        return fut

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        super().finish(metadata, results)
        files: dict[str, dict[str, Any]] = {}
        written = {wr.storage_data.relative_path for rank in results for wr in rank}
        for name in sorted(os.listdir(self.directory)):
            if name.startswith(_SUMS):
                with open(os.path.join(self.directory, name), "rb") as f:
                    files.update(json.loads(f.read()))
        missing = written - files.keys()
        if missing:
            raise CheckpointError(f"no checksums for shards {sorted(missing)} in {self.directory}")
        files[".metadata"] = digest(os.path.join(self.directory, ".metadata"))
        meta_bytes = json.dumps(self.meta, sort_keys=True, indent=1).encode()
        fsync_write(os.path.join(self.directory, META), meta_bytes)
        files[META] = {"size": len(meta_bytes), "sha256": hashlib.sha256(meta_bytes).hexdigest()}
        manifest = {
            "format": SHARDED_FORMAT,
            "step": int(self.meta["step"]),
            "created_unix": time.time(),
            "ranks": len(results),
            "files": dict(sorted(files.items())),
        }
        tmp = os.path.join(self.directory, f".{MANIFEST}.tmp")
        fsync_write(tmp, json.dumps(manifest, indent=1).encode())
        os.replace(tmp, os.path.join(self.directory, MANIFEST))
        fsync_dir(self.directory)
        for name in os.listdir(self.directory):
            if name.startswith(_SUMS):
                os.remove(os.path.join(self.directory, name))


def save_sharded(
    directory: str,
    state: dict[str, Any],
    meta: dict[str, Any],
    *,
    process_group: ProcessGroup | None = None,
    writer_cls: type[ShardWriter] = ShardWriter,
    stager: AsyncStager | None = None,
    in_process: bool = False,
) -> concurrent.futures.Future[object]:
    """Start an asynchronous sharded save of ``state`` into ``directory`` (every rank calls it;
    ``meta`` must hold ``"step"``). ``state`` is staged (copied) before this returns, so training
    may change it; the returned future is done once every shard and then the manifest are
    written. ``process_group``: a group of its own (gloo), so that the save's collectives in the
    background never interleave with training's. ``stager``: DCP's ``async_stager`` (None: a
    fresh host copy per save; a stager that keeps its copy must not be refilled while the
    previous save still writes from it). ``in_process``: write from DCP's background process (started at the
    first save, with a process group of its own) instead of a thread of this one."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType

    if "step" not in meta:
        raise ValueError("checkpoint meta must hold 'step'")
    os.makedirs(directory, exist_ok=True)
    saving = dcp.async_save(
        state,
        storage_writer=writer_cls(directory, meta),
        process_group=process_group,
        async_stager=stager,
        async_checkpointer_type=AsyncCheckpointerType.PROCESS if in_process else AsyncCheckpointerType.THREAD,
    )
    # DCP answers an AsyncSaveResponse only to a stager that stages asynchronously; none here does.
    assert isinstance(saving, concurrent.futures.Future), "stagers here stage synchronously"
    return saving


def load_sharded(path: str, state: dict[str, Any], *, process_group: ProcessGroup | None = None) -> None:
    """Load a sharded checkpoint into ``state`` (tensors and DTensors are filled in place; other
    entries replaced), resharding to the current world size. Verify it first (``verify``)."""
    import torch.distributed.checkpoint as dcp

    dcp.load(state, checkpoint_id=path, process_group=process_group)


def files_read(metadata: Metadata, state: dict[str, Any]) -> set[str]:
    """The files of a sharded checkpoint (described by its ``.metadata``) that ``dcp.load`` of
    ``state`` reads in this process: DCP's own default load plan, mapped to storage."""
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    planner = DefaultLoadPlanner()
    planner.set_up_planner(state, metadata, False)
    plan = planner.create_local_plan()
    return {metadata.storage_data[item.storage_index].relative_path for item in plan.items}


def assign_files(sizes: dict[str, int], readers: list[set[str]]) -> list[list[str]]:
    """Which rank verifies which file: each file by exactly one of the ranks that read it (any
    rank when none does) with the fewest bytes so far, files with fewer readers first (they have
    less choice), then larger first; every rank computes the same answer from the same inputs."""
    world = len(readers)
    load = [0] * world
    out: list[list[str]] = [[] for _ in range(world)]
    read_by = {name: [r for r in range(world) if name in readers[r]] for name in sizes}
    for name in sorted(sizes, key=lambda n: (len(read_by[n]) or world + 1, -sizes[n], n)):
        candidates = read_by[name] or list(range(world))
        r = min(candidates, key=lambda c: (load[c], c))
        out[r].append(name)
        load[r] += sizes[name]
    return out


def find_latest_valid_sharded(
    storage: str,
    run_name: str,
    state: dict[str, Any],
    *,
    process_group: ProcessGroup | None = None,
    filesystem: pafs.FileSystem | None = None,
) -> LoadedCheckpoint | None:
    """The newest intact checkpoint of ``run_name``, verified by every rank of ``process_group``
    together (collective: every rank calls it with its own ``state``, the state it will load);
    None when the run has none. ``state`` of the returned checkpoint is empty: load it with
    ``load_sharded``.

    Rank 0 lists the checkpoints and verifies each candidate's manifest and ``meta.json``; every
    rank verifies ``.metadata`` (it plans its reads from it) and then the shard files it will
    read (DCP's load plan for ``state``), each file by one of its readers and files nobody reads
    by the least loaded rank, so that every file of the manifest is hashed once and each rank
    hashes about 1/N of the bytes. The verdicts are gathered: a torn file anywhere makes every
    rank skip the checkpoint together and try the previous one. A single-writer checkpoint is
    verified whole by rank 0, as ``load_latest_valid`` does.

    Any process group works for the collectives (a gloo one on GPU nodes: they carry Python
    objects)."""
    import pickle

    import torch.distributed as dist

    rank, world = dist.get_rank(process_group), dist.get_world_size(process_group)
    fs = filesystem if filesystem is not None else storage_mod.filesystem_for(storage)[0]

    def from_rank0(obj: object) -> Any:
        box = [obj]
        dist.broadcast_object_list(box, group=process_group, group_src=0)
        return box[0]

    def gathered(obj: object) -> list[Any]:
        out: list[Any] = [None] * world
        dist.all_gather_object(out, obj, group=process_group)
        return out

    candidates: list[tuple[int, str]] = from_rank0(
        list_checkpoints(storage, run_name, filesystem=filesystem) if rank == 0 else None
    )
    for step, path in candidates:
        problems, manifest, meta = from_rank0(head(fs, path) if rank == 0 else None)
        if not problems and manifest is not None and manifest["format"] != SHARDED_FORMAT:
            problems = from_rank0(check(fs, path, keep_entries=[])[0] if rank == 0 else None)
        elif not problems and manifest is not None:
            t0 = time.perf_counter()
            files: dict[str, dict[str, Any]] = manifest["files"]
            mine: list[str] = []
            reads: set[str] = set()
            problem, data = (
                check_file(fs, path, ".metadata", files[".metadata"], keep=True)
                if ".metadata" in files
                else (f"{MANIFEST} lists no .metadata", None)
            )
            unreadable = None
            if problem is None and data is not None:
                try:
                    reads = files_read(pickle.loads(data), state)
                except Exception as err:  # every rank must reach the gather below
                    unreadable = f"{type(err).__name__}: {err}"
            plans = gathered((reads, unreadable))
            unreadable = next((u for _, u in plans if u), None)
            if unreadable:
                raise CheckpointError(f"checkpoint {path} cannot be loaded into this job's state: {unreadable}")
            shards = {n: int(w["size"]) for n, w in files.items() if n not in (META, ".metadata")}
            mine = assign_files(shards, [r for r, _ in plans])[rank]
            local = [problem] if problem else []
            for name in mine:
                problem, _ = check_file(fs, path, name, files[name])
                if problem:
                    local.append(problem)
            log.info(
                "checkpoint %s: rank %d verified %s (%d bytes) in %.2f s",
                path,
                rank,
                ", ".join(mine) or "no shard",
                sum(shards[n] for n in mine),
                time.perf_counter() - t0,
            )
            problems = sorted({p for rank_problems in gathered(local) for p in rank_problems})
        if problems:
            if rank == 0:
                log.warning(
                    "skipping %s: checkpoint %s is torn or corrupt: %s; falling back to the previous checkpoint",
                    path,
                    path,
                    "; ".join(problems),
                )
            continue
        assert manifest is not None, "head returns a manifest when it finds no problems"
        if rank == 0:
            log.info("using checkpoint %s (step %d) of %d found", path, step, len(candidates))
        return LoadedCheckpoint(path=path, step=int(manifest["step"]), meta=meta, state={}, format=manifest["format"])
    if candidates and rank == 0:
        log.warning("none of the %d checkpoints of run %r is intact", len(candidates), run_name)
    return None
