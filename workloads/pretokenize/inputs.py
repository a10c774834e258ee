"""Inputs of the pretokenize pipeline: listing the files, cutting them into units of work with
stable keys, streaming a unit's documents, and the train/validation assignment (pipeline.py has
the whole scheme)."""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from workloads.common import storage

FORMATS = ("parquet", "jsonl", "text")
_EXTENSIONS = {"parquet": (".parquet",), "jsonl": (".jsonl", ".json"), "text": ()}


class PretokenizeError(ValueError):
    """An input or option the pipeline cannot use."""


def format_of(path: str, given: str | None) -> str:
    """The format given, or the one the file extension names (otherwise: text)."""
    if given is not None:
        return given
    for fmt, exts in _EXTENSIONS.items():
        if path.endswith(exts) and exts:
            return fmt
    return "text"


def list_inputs(uri: str, fmt: str | None) -> list[tuple[str, int]]:
    """``(uri, size)`` of every input file, sorted: the file itself, or the files under a
    directory/prefix with the format's extensions (text: every file)."""
    import pyarrow.fs as pafs

    fs, base = storage.filesystem_for(uri)
    info = fs.get_file_info(base)
    if info.type == pafs.FileType.NotFound:
        raise PretokenizeError(f"--input {uri}: no such file or directory")
    prefix = "s3://" if storage.is_s3(uri) else ""
    if info.type == pafs.FileType.File:
        return [(prefix + base, int(info.size or 0))]
    exts = _EXTENSIONS[fmt] if fmt else tuple(e for es in _EXTENSIONS.values() for e in es)
    files = sorted(
        (prefix + i.path, int(i.size or 0))
        for i in fs.get_file_info(pafs.FileSelector(base, recursive=True))
        if i.type == pafs.FileType.File
        and not Path(i.path).name.startswith(".")
        and (fmt == "text" or i.path.endswith(exts))
    )
    if not files:
        raise PretokenizeError(
            f"--input {uri}: no input files; allowed: {', '.join(exts) if fmt != 'text' else 'any'} files "
            f"(format {fmt or 'by extension'})"
        )
    return files


def unit_key(index: int, uri: str, size: int, groups: tuple[int, int] | None = None) -> str:
    return f"{index:06d}-{hashlib.sha256(f'{uri}|{size}|{groups}'.encode()).hexdigest()[:12]}"


def row_group_runs(uri: str, unit_bytes: int) -> list[tuple[int, int]]:
    """Runs ``[first, end)`` of a Parquet file's row groups of about ``unit_bytes`` each."""
    import pyarrow.parquet as pq

    fs, path = storage.filesystem_for(uri)
    with fs.open_input_file(path) as f:
        meta = pq.ParquetFile(f).metadata
    runs, first, size = [], 0, 0
    for g in range(meta.num_row_groups):
        size += meta.row_group(g).total_byte_size
        if size >= unit_bytes:
            runs.append((first, g + 1))
            first, size = g + 1, 0
    if first < meta.num_row_groups or not runs:
        runs.append((first, meta.num_row_groups))
    return runs


def plan_units(inputs: list[tuple[str, int]], fmt: str | None, unit_bytes: int) -> list[dict[str, Any]]:
    """The units of work, in a stable order (see the module docstring). ``first``/``end``: the
    row groups of a Parquet unit; -1/-1 means the whole file."""
    units: list[dict[str, Any]] = []
    for uri, size in inputs:
        runs: list[tuple[int, int] | None] = (
            list(row_group_runs(uri, unit_bytes)) if format_of(uri, fmt) == "parquet" else [None]
        )
        for run in runs:
            first, end = run if run is not None and len(runs) > 1 else (-1, -1)
            groups = None if first < 0 else (first, end)
            units.append(
                {"uri": uri, "size": size, "first": first, "end": end, "key": unit_key(len(units), uri, size, groups)}
            )
    return units


def is_validation(text: str, fraction: float, seed: int) -> bool:
    """True for the documents of the held-out split: a keyed 64-bit hash of the text, below
    ``fraction`` of the range. The same text goes to the same split in every run."""
    if fraction <= 0.0:
        return False
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8, key=seed.to_bytes(8, "little", signed=True))
    return int.from_bytes(digest.digest(), "little") < fraction * 2.0**64


def read_documents(
    uri: str, fmt: str, text_column: str, batch: int, row_groups: tuple[int, int] | None = None
) -> Iterator[list[str]]:
    """The documents of one input file (of its ``row_groups`` run for Parquet), ``batch`` at a time, streamed."""
    fs, path = storage.filesystem_for(uri)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        with fs.open_input_file(path) as f:
            pf = pq.ParquetFile(f)
            names = pf.schema_arrow.names
            if text_column not in names:
                raise PretokenizeError(f"input {uri}: no column {text_column!r}; allowed: {', '.join(names)}")
            groups = None if row_groups is None else list(range(*row_groups))
            for record_batch in pf.iter_batches(batch_size=batch, columns=[text_column], row_groups=groups):
                yield [t for t in record_batch.column(0).to_pylist() if t]
    elif fmt == "jsonl":
        docs: list[str] = []
        with fs.open_input_stream(path) as f:
            for n, line in enumerate(io.TextIOWrapper(f, encoding="utf-8"), start=1):
                if not line.strip():
                    continue
                try:
                    text = json.loads(line)[text_column]
                except (ValueError, KeyError, TypeError):
                    text = None
                if not isinstance(text, str):
                    raise PretokenizeError(
                        f"input {uri}: line {n} is not a JSON object with a string {text_column!r}; "
                        f'allowed: one object per line such as {{"{text_column}": "..."}}'
                    ) from None
                if text:
                    docs.append(text)
                if len(docs) == batch:
                    yield docs
                    docs = []
        if docs:
            yield docs
    else:
        with fs.open_input_stream(path) as f:
            text = f.read().decode("utf-8", errors="replace")
        if text:
            yield [text]
