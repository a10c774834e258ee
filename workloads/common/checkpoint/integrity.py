"""The checkpoint format and its verification: one directory per checkpoint
(``<storage>/<run_name>/checkpoint_<step:09d>/``) with an integrity manifest written last
(``{"format", "step", "files": {name: {"size", "sha256"}}}``), read and checked here for both
layouts (sharded: sharded.py writes it; single-writer: single.py).

A checkpoint without a manifest, with a file of the wrong size or checksum, or with a missing
file, is torn: ``load_latest_valid`` skips it, logs why, and falls back to the previous one.

One module because it is the manifest's rules on the reading side: what is hashed, what makes a
checkpoint torn, how a run's checkpoints are named and listed.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs
import torch

from workloads.common import storage as storage_mod

log = logging.getLogger("workloads.checkpoint")

FORMAT = "hpray-checkpoint/1"
SHARDED_FORMAT = "hpray-checkpoint/2-dcp"
MANIFEST = "manifest.json"
META = "meta.json"
DIR_RE = re.compile(r"^checkpoint_(\d{9})$")
_CHUNK = 8 << 20


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


def fsync_write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def resolve(path: str, filesystem: pafs.FileSystem | None) -> tuple[pafs.FileSystem, str]:
    if filesystem is not None:
        return filesystem, path
    return storage_mod.filesystem_for(path)


def read_bytes(fs: pafs.FileSystem, path: str) -> bytes:
    with fs.open_input_stream(path) as f:
        data: bytes = f.read()
        return data


def check(
    fs: pafs.FileSystem, path: str, keep_entries: list[str] | None = None
) -> tuple[list[str], dict[str, Any] | None, dict[str, bytes]]:
    """(problems, manifest, contents of ``meta.json`` and of the single-writer ``<entry>.pt``
    files named in ``keep_entries``, every one when None). Every listed file is hashed."""
    try:
        manifest = json.loads(read_bytes(fs, storage_mod.join(path, MANIFEST)))
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
        problem, data = check_file(fs, path, name, want, keep=keep)
        if problem:
            problems.append(problem)
        elif data is not None:
            contents[name] = data
    return problems, manifest, contents


def check_file(
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
    fs, p = resolve(path, filesystem)
    return check(fs, p)[0]


def load(
    path: str, filesystem: pafs.FileSystem | None = None, map_location: str = "cpu", keys: list[str] | None = None
) -> LoadedCheckpoint:
    """Verify and load one checkpoint. ``keys`` limits which ``state`` entries are returned
    (e.g. ``["model"]`` for inference); every file is still verified."""
    fs, p = resolve(path, filesystem)
    problems, manifest, contents = check(fs, p, keys)
    if problems:
        raise CheckpointError(f"checkpoint {path} is torn or corrupt: " + "; ".join(problems))
    assert manifest is not None, "check returns a manifest when it finds no problems"
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


def fsync_dir(directory: str) -> None:
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def digest(path: str) -> dict[str, Any]:
    sha, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            sha.update(chunk)
            size += len(chunk)
    return {"size": size, "sha256": sha.hexdigest()}


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


def head(fs: pafs.FileSystem, path: str) -> tuple[list[str], dict[str, Any] | None, dict[str, Any]]:
    """(problems, manifest, meta) of a checkpoint from its small files only: the manifest and
    ``meta.json`` (read and hashed)."""
    try:
        manifest = json.loads(read_bytes(fs, storage_mod.join(path, MANIFEST)))
    except FileNotFoundError:
        return [f"no {MANIFEST} (the checkpoint was not completely written)"], None, {}
    except (OSError, ValueError) as err:
        return [f"{MANIFEST} is unreadable: {err}"], None, {}
    if manifest.get("format") not in (FORMAT, SHARDED_FORMAT) or not isinstance(manifest.get("files"), dict):
        return [f"{MANIFEST} is not a {FORMAT} manifest"], None, {}
    want = manifest["files"].get(META)
    if want is None:
        return [f"{MANIFEST} lists no {META}"], None, {}
    problem, data = check_file(fs, path, META, want, keep=True)
    if problem or data is None:
        return [problem or f"{META} is unreadable"], None, {}
    return [], manifest, json.loads(data)
