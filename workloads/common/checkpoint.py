"""The checkpoint format: one directory per checkpoint, with an integrity manifest written last.

Two layouts share the manifest (``<storage>/<run_name>/checkpoint_<step:09d>/``)::

    sharded (the training job, torch.distributed.checkpoint):
    __<rank>_0.distcp              every rank's own shards, written by that rank in parallel
    .metadata                      DCP's index of the shards, written by rank 0 after all ranks
    meta.json                      JSON metadata (step, model config, data position, ...)
    manifest.json                  {"format", "step", "files": {name: {"size", "sha256"}}}

    single-writer (``save``/``upload``): one ``torch.save`` file per entry of ``state``,
    meta.json, manifest.json.

In the sharded layout each rank hashes the files it wrote once they are fsynced and leaves the
sums in a small side file; rank 0 writes the manifest from them only after DCP has gathered every
rank's write results (so after every shard is on disk) and after ``.metadata``.

The manifest is written last, atomically (temporary name, fsync, rename) and, when copying to
storage (``upload``), copied after every other file. A checkpoint without a manifest, with a
file of the wrong size or checksum, or with a missing file, is torn: ``load_latest_valid`` skips
it, logs why, and falls back to the previous one.

Stable API (the training job and the inference app both use it):

- ``save(directory, state, meta) -> dict``: write a checkpoint into a local directory; returns
  the manifest.
- ``upload(local_dir, dest, filesystem=None)``: copy a saved checkpoint to ``dest`` (path or
  s3:// URI), manifest last. ``ray_upload_fn`` is the same as a Ray Train
  ``checkpoint_upload_fn``.
- ``verify(path, filesystem=None) -> list[str]``: the problems found (empty: intact).
- ``load(path, filesystem=None, map_location="cpu", keys=None) -> LoadedCheckpoint``: verify and
  load; raises ``CheckpointError`` when torn.
- ``load_entry_into(path, entry, tensors)``: copy one entry (``"model"``) into preallocated
  tensors, converting to their dtype, reading nothing else (a serving replica's load).
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

One module because it is one format: both layouts' writers and the readers share the manifest's
rules (what is hashed, the order of writes, what makes a checkpoint torn), and a change to one
side must be read next to the other.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import io
import json
import logging
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, cast

import pyarrow.fs as pafs
import torch
from torch.distributed.checkpoint.filesystem import FileSystemWriter

from workloads.common import storage as storage_mod

if TYPE_CHECKING:
    from ray.train import Checkpoint
    from torch.distributed import ProcessGroup
    from torch.distributed.checkpoint.metadata import Metadata
    from torch.distributed.checkpoint.planner import SavePlan, SavePlanner
    from torch.distributed.checkpoint.staging import AsyncStager
    from torch.distributed.checkpoint.storage import WriteResult
    from torch.futures import Future
    from typing_extensions import Buffer

log = logging.getLogger("workloads.checkpoint")

FORMAT = "hpray-checkpoint/1"
SHARDED_FORMAT = "hpray-checkpoint/2-dcp"
_SUMS = ".sums-"
MANIFEST = "manifest.json"
META = "meta.json"
DIR_RE = re.compile(r"^checkpoint_(\d{9})$")
_CHUNK = 8 << 20
_KICK = 4 << 20  # bytes between early background fsyncs while saving


class CheckpointError(Exception):
    """A checkpoint is torn, corrupt or missing."""


@dataclass
class LoadedCheckpoint:
    path: str  # where it was read from (path inside the filesystem, or the s3 URI)
    step: int
    meta: dict[str, Any]
    state: dict[str, Any]  # name (without .pt) -> the object torch.save wrote
    format: str = FORMAT  # the manifest's: FORMAT (single-writer) or SHARDED_FORMAT


def dir_name(step: int) -> str:
    """The directory name of the checkpoint taken after ``step`` optimizer steps."""
    return f"checkpoint_{step:09d}"


def _fsync_write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


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
    _fsync_write(os.path.join(directory, META), meta_bytes)
    files[META] = {"size": len(meta_bytes), "sha256": hashlib.sha256(meta_bytes).hexdigest()}
    manifest = {
        "format": FORMAT,
        "step": int(meta["step"]),
        "created_unix": time.time(),
        "files": dict(sorted(files.items())),
    }
    tmp = os.path.join(directory, f".{MANIFEST}.tmp")
    _fsync_write(tmp, json.dumps(manifest, indent=1).encode())
    os.replace(tmp, os.path.join(directory, MANIFEST))
    # The rename itself is durable only once the directory is synced.
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return manifest


def _resolve(path: str, filesystem: pafs.FileSystem | None) -> tuple[pafs.FileSystem, str]:
    if filesystem is not None:
        return filesystem, path
    return storage_mod.filesystem_for(path)


def upload(local_dir: str, dest: str, filesystem: pafs.FileSystem | None = None) -> None:
    """Copy a checkpoint written by ``save`` to ``dest``; the manifest is copied last, so a
    reader never sees a manifest before the files it describes."""
    fs, dest_path = _resolve(dest, filesystem)
    info = fs.get_file_info(dest_path)
    if info.type != pafs.FileType.NotFound:
        # A torn copy from an earlier, failed attempt at the same step: replace it.
        fs.delete_dir(dest_path)
    fs.create_dir(dest_path, recursive=True)
    names = sorted(n for n in os.listdir(local_dir) if not n.startswith("."))
    if MANIFEST not in names:
        raise CheckpointError(f"{local_dir} has no {MANIFEST}; write it with checkpoint.save")
    names.remove(MANIFEST)
    for name in [*names, MANIFEST]:
        with (
            open(os.path.join(local_dir, name), "rb") as src,
            fs.open_output_stream(storage_mod.join(dest_path, name)) as out,
        ):
            while chunk := src.read(_CHUNK):
                out.write(chunk)


def ray_upload_fn(checkpoint: Checkpoint, checkpoint_dir_name: str) -> Checkpoint:
    """A Ray Train ``checkpoint_upload_fn``: copies into the run's directory, manifest last.

    Ray calls it (in its upload thread with ``CheckpointUploadMode.ASYNC``) with the local
    checkpoint and the directory name given to ``ray.train.report``.
    """
    import ray.train
    from ray.train import Checkpoint

    storage = ray.train.get_context().get_storage()
    dest = storage_mod.join(storage.experiment_fs_path, checkpoint_dir_name)
    upload(checkpoint.path, dest, filesystem=storage.storage_filesystem)
    return Checkpoint(path=dest, filesystem=storage.storage_filesystem)


def _read(fs: pafs.FileSystem, path: str) -> bytes:
    with fs.open_input_stream(path) as f:
        data: bytes = f.read()
        return data


def _check(
    fs: pafs.FileSystem, path: str, keep_entries: list[str] | None = None
) -> tuple[list[str], dict[str, Any] | None, dict[str, bytes]]:
    """(problems, manifest, contents of ``meta.json`` and of the single-writer ``<entry>.pt``
    files named in ``keep_entries``, every one when None). Every listed file is hashed."""
    try:
        manifest = json.loads(_read(fs, storage_mod.join(path, MANIFEST)))
    except FileNotFoundError:
        return [f"no {MANIFEST} (the checkpoint was not completely written)"], None, {}
    except (OSError, ValueError) as err:
        return [f"{MANIFEST} is unreadable: {err}"], None, {}
    if manifest.get("format") not in (FORMAT, SHARDED_FORMAT) or not isinstance(manifest.get("files"), dict):
        return [f"{MANIFEST} is not a {FORMAT} manifest"], None, {}
    problems: list[str] = []
    contents: dict[str, bytes] = {}
    for name, want in manifest["files"].items():
        # Shards are hashed in chunks and not kept; the small files are returned for loading.
        keep = name == META or (name.endswith(".pt") and (keep_entries is None or name[:-3] in keep_entries))
        problem, data = _check_file(fs, path, name, want, keep=keep)
        if problem:
            problems.append(problem)
        elif data is not None:
            contents[name] = data
    return problems, manifest, contents


def _check_file(
    fs: pafs.FileSystem, path: str, name: str, want: dict[str, Any], *, keep: bool = False
) -> tuple[str | None, bytes | None]:
    """(the problem with one file of a checkpoint against its manifest entry or None, its
    contents when ``keep`` and intact). The whole file is read and hashed."""
    file_path = storage_mod.join(path, name)
    info = fs.get_file_info(file_path)
    if info.type == pafs.FileType.NotFound:
        return f"{name} is missing", None
    if info.size != want["size"]:
        return f"{name} is {info.size} bytes, the manifest says {want['size']}", None
    sha, chunks = hashlib.sha256(), []
    try:
        with fs.open_input_stream(file_path) as f:
            while chunk := f.read(_CHUNK):
                sha.update(chunk)
                if keep:
                    chunks.append(chunk)
    except OSError as err:  # e.g. deleted while read: a verdict, so that every rank reaches the gather
        return f"{name} is unreadable: {err}", None
    if sha.hexdigest() != want["sha256"]:
        return f"{name} does not match its sha256 in the manifest", None
    return None, b"".join(chunks) if keep else None


def verify(path: str, filesystem: pafs.FileSystem | None = None) -> list[str]:
    """Problems with the checkpoint at ``path`` (empty list: intact)."""
    fs, p = _resolve(path, filesystem)
    return _check(fs, p)[0]


def load(
    path: str, filesystem: pafs.FileSystem | None = None, map_location: str = "cpu", keys: list[str] | None = None
) -> LoadedCheckpoint:
    """Verify and load one checkpoint. ``keys`` limits which ``state`` entries are returned
    (e.g. ``["model"]`` for inference); every file is still verified."""
    fs, p = _resolve(path, filesystem)
    problems, manifest, contents = _check(fs, p, keys)
    if problems:
        raise CheckpointError(f"checkpoint {path} is torn or corrupt: " + "; ".join(problems))
    assert manifest is not None, "_check returns a manifest when it finds no problems"
    meta = json.loads(contents[META]) if META in contents else {}
    if manifest["format"] == SHARDED_FORMAT:
        state = _gather_sharded(fs, p, keys) if keys is None or keys else {}
    else:
        state = {
            name[:-3]: torch.load(io.BytesIO(data), map_location=map_location, weights_only=False)
            for name, data in contents.items()
            if name.endswith(".pt") and (keys is None or name[:-3] in keys)
        }
    return LoadedCheckpoint(path=path, step=int(manifest["step"]), meta=meta, state=state, format=manifest["format"])


def _fsync_dir(directory: str) -> None:
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _digest(path: str) -> dict[str, Any]:
    sha, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            sha.update(chunk)
            size += len(chunk)
    return {"size": size, "sha256": sha.hexdigest()}


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
        sums = {name: _digest(os.path.join(self.directory, name)) for name in names}
        if names:
            side = os.path.join(self.directory, f"{_SUMS}{names[0]}.json")
            _fsync_write(side, json.dumps(sums).encode())
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
        files[".metadata"] = _digest(os.path.join(self.directory, ".metadata"))
        meta_bytes = json.dumps(self.meta, sort_keys=True, indent=1).encode()
        _fsync_write(os.path.join(self.directory, META), meta_bytes)
        files[META] = {"size": len(meta_bytes), "sha256": hashlib.sha256(meta_bytes).hexdigest()}
        manifest = {
            "format": SHARDED_FORMAT,
            "step": int(self.meta["step"]),
            "created_unix": time.time(),
            "ranks": len(results),
            "files": dict(sorted(files.items())),
        }
        tmp = os.path.join(self.directory, f".{MANIFEST}.tmp")
        _fsync_write(tmp, json.dumps(manifest, indent=1).encode())
        os.replace(tmp, os.path.join(self.directory, MANIFEST))
        _fsync_dir(self.directory)
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


def _gather_sharded(fs: pafs.FileSystem, path: str, keys: list[str] | None) -> dict[str, Any]:
    """A sharded checkpoint as plain tensors in this process (inference, tools): DCP's own
    conversion to one ``torch.save`` file, read back; only ``keys`` are returned."""
    import tempfile

    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    if not isinstance(fs, pafs.LocalFileSystem):
        raise CheckpointError(f"{path}: sharded checkpoints are read from a POSIX path")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "full.pt")
        dcp_to_torch_save(path, out)
        full = torch.load(out, map_location="cpu", weights_only=False)
    return {k: v for k, v in full.items() if keys is None or k in keys}


def load_entry_into(
    path: str, entry: str, tensors: dict[str, torch.Tensor], filesystem: pafs.FileSystem | None = None
) -> None:
    """Copy the tensors of one ``state`` entry (``"model"``: a module's state dict) into
    ``tensors`` in place, converted to each target's dtype; nothing else is read into memory.
    ``tensors`` must name every tensor of the entry and nothing more (``CheckpointError``
    otherwise). Verify the checkpoint first (``load(path, keys=[])`` verifies and reads meta.json).

    Sharded: DCP loads only the entry's items, one shard file region at a time, straight into the
    preallocated tensors (the optimizer's items are never read). Single-writer: ``<entry>.pt`` is
    memory-mapped (local) and copied over tensor by tensor."""
    fs, p = _resolve(path, filesystem)
    manifest = json.loads(_read(fs, storage_mod.join(p, MANIFEST)))
    if manifest.get("format") == SHARDED_FORMAT:
        import torch.distributed.checkpoint as dcp

        if not isinstance(fs, pafs.LocalFileSystem):
            raise CheckpointError(f"{path}: sharded checkpoints are read from a POSIX path")
        reader = dcp.FileSystemReader(p)
        stored = {
            k.removeprefix(f"{entry}.") for k in reader.read_metadata().state_dict_metadata if k.startswith(f"{entry}.")
        }
        _same_keys(path, entry, stored, tensors)
        # One process reads the whole entry (a replica, a tool), even where a process group exists.
        dcp.load({entry: tensors}, storage_reader=reader, no_dist=True)
        return
    name = storage_mod.join(p, f"{entry}.pt")
    if isinstance(fs, pafs.LocalFileSystem):
        source = torch.load(name, map_location="cpu", mmap=True, weights_only=True)
    else:
        source = torch.load(io.BytesIO(_read(fs, name)), map_location="cpu", weights_only=True)
    # Checkpoints of a torch.compile'd or DDP-wrapped model carry prefixes; strip them.
    source = {k.removeprefix("_orig_mod.").removeprefix("module."): v for k, v in source.items()}
    _same_keys(path, entry, set(source), tensors)
    with torch.no_grad():
        for key, target in tensors.items():
            if target.shape != source[key].shape:
                raise CheckpointError(
                    f"{path}: {entry}.{key} is {tuple(source[key].shape)} in the checkpoint, "
                    f"{tuple(target.shape)} in the model"
                )
            target.copy_(source[key])
    del source


def _same_keys(path: str, entry: str, stored: set[str], tensors: dict[str, torch.Tensor]) -> None:
    missing, extra = sorted(set(tensors) - stored), sorted(stored - set(tensors))
    if missing or extra:
        raise CheckpointError(
            f"{path}: entry {entry!r} does not match the model: missing {missing[:5]}, unexpected {extra[:5]}"
        )


def list_checkpoints(storage: str, run_name: str, filesystem: pafs.FileSystem | None = None) -> list[tuple[int, str]]:
    """``[(step, path)]`` of the run's checkpoint directories, newest first."""
    if filesystem is not None:
        fs, base = filesystem, storage
    else:
        fs, base = storage_mod.filesystem_for(storage)
    run_dir = storage_mod.join(base, run_name)
    if fs.get_file_info(run_dir).type == pafs.FileType.NotFound:
        return []
    found = []
    for info in fs.get_file_info(pafs.FileSelector(run_dir, allow_not_found=True)):
        m = DIR_RE.match(info.base_name)
        if m and info.type == pafs.FileType.Directory:
            found.append((int(m.group(1)), info.path))
    return sorted(found, reverse=True)


def load_latest_valid(
    storage: str,
    run_name: str,
    map_location: str = "cpu",
    keys: list[str] | None = None,
    filesystem: pafs.FileSystem | None = None,
) -> LoadedCheckpoint | None:
    """The newest intact checkpoint of ``run_name`` under ``storage``, or None if there is none.

    Torn or corrupt checkpoints are skipped with a warning naming each problem; the one used is
    logged at INFO.
    """
    if filesystem is not None:
        fs = filesystem
    else:
        fs, _ = storage_mod.filesystem_for(storage)
    candidates = list_checkpoints(storage, run_name, filesystem=filesystem)
    for step, path in candidates:
        try:
            loaded = load(path, filesystem=fs, map_location=map_location, keys=keys)
        except CheckpointError as err:
            log.warning("skipping %s: %s; falling back to the previous checkpoint", path, err)
            continue
        log.info("using checkpoint %s (step %d) of %d found", path, step, len(candidates))
        return loaded
    if candidates:
        log.warning("none of the %d checkpoints of run %r is intact", len(candidates), run_name)
    return None


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


def _head(fs: pafs.FileSystem, path: str) -> tuple[list[str], dict[str, Any] | None, dict[str, Any]]:
    """(problems, manifest, meta) of a checkpoint from its small files only: the manifest and
    ``meta.json`` (read and hashed)."""
    try:
        manifest = json.loads(_read(fs, storage_mod.join(path, MANIFEST)))
    except FileNotFoundError:
        return [f"no {MANIFEST} (the checkpoint was not completely written)"], None, {}
    except (OSError, ValueError) as err:
        return [f"{MANIFEST} is unreadable: {err}"], None, {}
    if manifest.get("format") not in (FORMAT, SHARDED_FORMAT) or not isinstance(manifest.get("files"), dict):
        return [f"{MANIFEST} is not a {FORMAT} manifest"], None, {}
    want = manifest["files"].get(META)
    if want is None:
        return [f"{MANIFEST} lists no {META}"], None, {}
    problem, data = _check_file(fs, path, META, want, keep=True)
    if problem or data is None:
        return [problem or f"{META} is unreadable"], None, {}
    return [], manifest, json.loads(data)


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
        problems, manifest, meta = from_rank0(_head(fs, path) if rank == 0 else None)
        if not problems and manifest is not None and manifest["format"] != SHARDED_FORMAT:
            problems = from_rank0(_check(fs, path, keep_entries=[])[0] if rank == 0 else None)
        elif not problems and manifest is not None:
            t0 = time.perf_counter()
            files: dict[str, dict[str, Any]] = manifest["files"]
            mine: list[str] = []
            reads: set[str] = set()
            problem, data = (
                _check_file(fs, path, ".metadata", files[".metadata"], keep=True)
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
                problem, _ = _check_file(fs, path, name, files[name])
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
        assert manifest is not None, "_head returns a manifest when it finds no problems"
        if rank == 0:
            log.info("using checkpoint %s (step %d) of %d found", path, step, len(candidates))
        return LoadedCheckpoint(path=path, step=int(manifest["step"]), meta=meta, state={}, format=manifest["format"])
    if candidates and rank == 0:
        log.warning("none of the %d checkpoints of run %r is intact", len(candidates), run_name)
    return None
