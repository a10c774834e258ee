"""The pretokenize pipeline: raw documents → fixed-size token shards and a manifest, on Ray Data.

Scheme (resumable, memory bounded per worker, nothing of the corpus on the driver):

1. **List** the input files (sorted; a file, a directory or an ``s3://`` prefix) and cut them
   into *units* of work: a JSON Lines or text file is one unit; a Parquet file is one unit per
   run of row groups of about ``unit_bytes`` (uncompressed, from the footer), so a few large
   files still spread over many workers. A unit is named by a stable key,
   ``<index>-<sha256(path, size, row groups)[:12]>``.
2. **Tokenize** (Ray Data): ``from_items(units)`` → ``map_batches(TokenizeFiles, batch_size=1)``
   on an actor pool; each actor loads the tokenizer once. A unit streams its file (Parquet row
   groups in batches, JSON Lines line by line, a text file as one document), tokenizes
   ``docs_per_batch`` documents at a time, appends EOS after each, routes each document to
   ``train`` or ``validation`` by a keyed hash of its text (:func:`is_validation`), and appends
   the ids to ``_parts/<key>.<split>.bin`` as it goes. The part files are renamed into place
   and then ``_parts/<key>.json`` (token and document counts) is written, atomically, last.
   A unit whose record exists and whose part sizes match it is *done*: a rerun skips it.
3. **Pack** (driver, one shard in memory): the parts of a split, in unit order, are one token
   stream cut into shards of ``shard_tokens``. Shard ``k`` is a fixed range of that stream, so a
   shard already on disk with its full size is kept (hashed, not rewritten).
4. **Manifest** last (``token_shards.write_manifest``, atomic), then ``_parts`` is removed.

A rerun after a failure redoes only the units without a record and the shards not yet written;
a rerun of a complete dataset (manifest present) checks it and returns. Guards: the run's
settings (tokenizer, format, text column, validation fraction, seed, shard size) are recorded in
``_parts/settings.json`` and a rerun with others is refused (its parts would not match); a
changed input file is a new unit key (path and size are in it), so only it is redone; shards of
an earlier pack are kept only when the units are the same (``_parts/pack.json``), else rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from workloads.common import storage, token_shards
from workloads.common.token_shards import Manifest, ShardInfo, SplitInfo, TokenizerInfo
from workloads.common.tokenizer import Tokenizer, load_tokenizer
from workloads.pretokenize.inputs import (
    FORMATS,
    PretokenizeError,
    format_of,
    is_validation,
    list_inputs,
    plan_units,
    read_documents,
)

__all__ = ["FORMATS", "PARTS", "PretokenizeConfig", "PretokenizeError", "TokenizeFiles", "is_validation", "run"]

PARTS = "_parts"


@dataclass(frozen=True)
class PretokenizeConfig:
    input: str
    output: str
    tokenizer: str
    format: str | None = None
    text_column: str = "text"
    validation_fraction: float = 0.01
    shard_tokens: int = 1 << 26
    seed: int = 0
    workers: int | None = None
    docs_per_batch: int = 1024
    keep_parts: bool = False
    eos_token: str | None = None
    unit_bytes: int = 256 << 20
    cpus_per_worker: int = 1

    def check(self) -> None:
        if not 0.0 <= self.validation_fraction < 1.0:
            raise PretokenizeError(f"--validation-fraction {self.validation_fraction}: allowed 0 <= fraction < 1")
        if self.shard_tokens < 2:
            raise PretokenizeError(f"--shard-tokens {self.shard_tokens}: allowed 2 or more")
        if self.format is not None and self.format not in FORMATS:
            raise PretokenizeError(f"--format {self.format}: allowed {', '.join(FORMATS)}")
        if storage.is_s3(self.output) or "://" in self.output:
            raise PretokenizeError(
                f"--output {self.output}: allowed a shared POSIX directory (FSx); the reader reads shards by offset"
            )
        if self.unit_bytes < 1:
            raise PretokenizeError(f"--unit-mib {self.unit_bytes / 2**20:g}: allowed more than 0")
        if self.cpus_per_worker < 1:
            raise PretokenizeError(f"--cpus-per-worker {self.cpus_per_worker}: allowed 1 or more")
        if self.workers is not None and self.workers < 1:
            raise PretokenizeError(f"--workers {self.workers}: allowed 1 or more")


class TokenizeFiles:
    """Ray Data callable class: tokenizes the units of a batch into part files (see the module
    docstring); returns one row of counts per unit."""

    def __init__(self, cfg: dict[str, Any], threads: int | None = None) -> None:
        # The tokenizers library encodes a batch on a thread pool as large as the machine; an actor
        # that reserved ``threads`` CPUs uses that many (set before the pool starts, at first use).
        if threads is not None:
            os.environ.setdefault("RAYON_NUM_THREADS", str(threads))
        self.cfg = PretokenizeConfig(**cfg)
        self.tok: Tokenizer = load_tokenizer(self.cfg.tokenizer, eos_token=self.cfg.eos_token)
        self.dtype = token_shards.dtype_for(self.tok.vocab_size)
        self.parts = Path(self.cfg.output) / PARTS

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list[Any]]:
        rows = [
            self.tokenize(str(u), int(s), str(k), None if int(a) < 0 else (int(a), int(b)))
            for u, s, k, a, b in zip(
                batch["uri"], batch["size"], batch["key"], batch["first"], batch["end"], strict=True
            )
        ]
        return {name: [r[name] for r in rows] for name in rows[0]} if rows else {}

    def tokenize(self, uri: str, size: int, key: str, row_groups: tuple[int, int] | None = None) -> dict[str, Any]:
        done = read_unit(self.parts, key, self.dtype)
        if done is not None:
            return {**done, "skipped": True}
        self.parts.mkdir(parents=True, exist_ok=True)
        counts: dict[str, Any] = {
            "key": key,
            "uri": uri,
            "train_tokens": 0,
            "validation_tokens": 0,
            "train_docs": 0,
            "validation_docs": 0,
            # UTF-8 bytes of the documents' text, for the trainer's bits per byte.
            "train_bytes": 0,
            "validation_bytes": 0,
        }
        tmp = {s: self.parts / f".{key}.{s}.bin.tmp" for s in token_shards.SPLITS}
        files = {s: open(p, "wb") for s, p in tmp.items()}  # noqa: SIM115 (closed below)
        try:
            fmt = format_of(uri, self.cfg.format)
            for docs in read_documents(uri, fmt, self.cfg.text_column, self.cfg.docs_per_batch, row_groups):
                for text, ids in zip(docs, self.tok.encode_batch(docs), strict=True):
                    split = (
                        "validation" if is_validation(text, self.cfg.validation_fraction, self.cfg.seed) else "train"
                    )
                    arr = np.empty(len(ids) + 1, dtype=self.dtype)
                    arr[:-1] = ids
                    arr[-1] = self.tok.eos_id
                    files[split].write(arr.tobytes())
                    counts[f"{split}_tokens"] += arr.size
                    counts[f"{split}_docs"] += 1
                    counts[f"{split}_bytes"] += len(text.encode("utf-8"))
            for f in files.values():
                f.flush()
                os.fsync(f.fileno())
        finally:
            for f in files.values():
                f.close()
        for s, p in tmp.items():
            os.replace(p, self.parts / f"{key}.{s}.bin")
        token_shards.atomic_write(self.parts / f"{key}.json", json.dumps(counts).encode())
        return {**counts, "skipped": False}


def read_unit(parts: Path, key: str, dtype: np.dtype) -> dict[str, Any] | None:
    """The record of a finished unit, or None when it is absent or its parts do not match it."""
    try:
        record: dict[str, Any] = json.loads((parts / f"{key}.json").read_text())
    except (FileNotFoundError, ValueError):
        return None
    for split in token_shards.SPLITS:
        part = parts / f"{key}.{split}.bin"
        if not part.is_file() or part.stat().st_size != record[f"{split}_tokens"] * dtype.itemsize:
            return None
    return record


def pack_split(
    out: Path, split: str, records: list[dict[str, Any]], dtype: np.dtype, shard_tokens: int, log: Callable[[str], None]
) -> list[ShardInfo]:
    """Cut the split's parts (in unit order) into shards; shards already written are kept."""
    sizes = [int(r[f"{split}_tokens"]) for r in records]
    total = sum(sizes)
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    shards: list[ShardInfo] = []
    n_shards = -(-total // shard_tokens)
    for k in range(n_shards):
        lo, hi = k * shard_tokens, min(total, (k + 1) * shard_tokens)
        name = token_shards.shard_name(split, k)
        path = out / name
        if path.is_file() and path.stat().st_size == (hi - lo) * dtype.itemsize:
            shards.append(ShardInfo(name, hi - lo, (hi - lo) * dtype.itemsize, token_shards.sha256_file(path)))
            continue
        buf = np.empty(hi - lo, dtype=dtype)
        first = int(np.searchsorted(starts, lo, side="right")) - 1
        i, fill = first, 0
        while fill < hi - lo:
            offset = lo + fill - int(starts[i])
            take = min(sizes[i] - offset, hi - lo - fill)
            if take > 0:
                part = out / PARTS / f"{records[i]['key']}.{split}.bin"
                buf[fill : fill + take] = np.fromfile(part, dtype=dtype, count=take, offset=offset * dtype.itemsize)
                fill += take
            i += 1
        shards.append(token_shards.write_shard(out, name, buf))
        if (k + 1) % 16 == 0 or k + 1 == n_shards:
            log(f"pack {split}: {k + 1}/{n_shards} shards")
    return shards


def split_bytes(records: list[dict[str, Any]]) -> dict[str, Any]:
    """``{"split_bytes": {split: UTF-8 bytes of its documents}}`` for the manifest's extra (the
    trainer's bits per byte: workloads/training/evaluate.py); nothing when a unit's record
    predates the count."""
    if not all(f"{split}_bytes" in r for r in records for split in token_shards.SPLITS):
        return {}
    return {"split_bytes": {split: sum(int(r[f"{split}_bytes"]) for r in records) for split in token_shards.SPLITS}}


def _tokenize_rows(cfg: PretokenizeConfig, units: list[dict[str, Any]], local: bool) -> Iterator[dict[str, Any]]:
    """Each unit's counts row: on Ray Data (an actor pool), or in this process one after another."""
    if local:
        worker = TokenizeFiles(asdict(cfg))
        for u in units:
            yield worker.tokenize(u["uri"], u["size"], u["key"], None if u["first"] < 0 else (u["first"], u["end"]))
        return
    import ray

    if not ray.is_initialized():
        ray.init()
    cpus = ray.cluster_resources().get("CPU", 1)  # type: ignore[no-untyped-call]
    workers = cfg.workers or max(1, int(cpus) // cfg.cpus_per_worker)
    ds = ray.data.from_items(units, override_num_blocks=len(units)).map_batches(
        TokenizeFiles,
        fn_constructor_kwargs={"cfg": asdict(cfg), "threads": cfg.cpus_per_worker},
        batch_size=1,
        compute=ray.data.ActorPoolStrategy(size=min(workers, len(units))),
        num_cpus=cfg.cpus_per_worker,
    )
    yield from ds.iter_rows()


def settings_digest(cfg: PretokenizeConfig, tok: Tokenizer) -> str:
    """What decides every part's and shard's bytes besides the inputs: the tokenizer and the
    options that change tokens, splits or shards. A resumed run must have the same."""
    what = {
        "tokenizer": tok.fingerprint,
        "eos_id": tok.eos_id,
        "format": cfg.format,
        "text_column": cfg.text_column,
        "validation_fraction": cfg.validation_fraction,
        "seed": cfg.seed,
        "shard_tokens": cfg.shard_tokens,
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


def dataset_digest(settings: str, units: list[dict[str, Any]]) -> str:
    """The settings and the units (paths, sizes, row groups: their keys) together."""
    return hashlib.sha256(json.dumps([settings, [u["key"] for u in units]]).encode()).hexdigest()


def _fresh_shards(out: Path, digest: str) -> None:
    """Shards left by an earlier pack are kept only if it packed the same units (a changed input
    changes the token stream); otherwise they are removed before packing."""
    path = out / PARTS / "pack.json"
    try:
        held = json.loads(path.read_text())["dataset_digest"]
    except (FileNotFoundError, ValueError, KeyError):
        held = None
    if held != digest:
        for split in token_shards.SPLITS:
            shutil.rmtree(out / split, ignore_errors=True)
        token_shards.atomic_write(path, json.dumps({"dataset_digest": digest}).encode())


def _claim(out: Path, digest: str) -> None:
    """Record the settings of the run that writes ``out``; refuse one left by other settings,
    whose parts and shards this run would otherwise take as its own."""
    path = out / PARTS / "settings.json"
    try:
        held = str(json.loads(path.read_text())["settings_digest"])
    except (FileNotFoundError, ValueError, KeyError):
        held = None
    if held is not None and held != digest:
        raise PretokenizeError(
            f"--output {out} holds an unfinished run with other inputs or settings (digest {held[:16]}, now "
            f"{digest[:16]}); allowed: the same --input, --tokenizer and options to resume it, or an empty --output"
        )
    if held is None:
        token_shards.atomic_write(path, json.dumps({"settings_digest": digest}).encode())


def run(
    cfg: PretokenizeConfig,
    *,
    log: Callable[[str], None] = print,
    local: bool = False,
    timings: dict[str, float] | None = None,
) -> Manifest:
    """Pretokenize ``cfg.input`` into ``cfg.output`` (see the module docstring); the manifest.
    ``local``: tokenize in this process without Ray (small corpora, the benchmark's baseline).
    ``timings`` (if given) receives the seconds of the ``tokenize`` and ``pack`` phases."""
    cfg.check()
    out = Path(cfg.output)
    tok = load_tokenizer(cfg.tokenizer, eos_token=cfg.eos_token)
    units = plan_units(list_inputs(cfg.input, cfg.format), cfg.format, cfg.unit_bytes)
    settings = settings_digest(cfg, tok)
    digest = dataset_digest(settings, units)
    if (out / token_shards.MANIFEST).is_file():
        manifest = token_shards.read_manifest(out)
        token_shards.verify(manifest, shards=[], tokenizer_fingerprint=tok.fingerprint)
        made = str(manifest.extra.get("dataset_digest", ""))
        if made != digest:
            raise PretokenizeError(
                f"--output {out} holds a dataset made from other inputs or settings (digest {made[:16]}, now "
                f"{digest[:16]}); allowed: the same --input, --tokenizer and options, or another --output"
            )
        log(f"{out}: complete ({manifest.total_tokens} tokens), nothing to do")
        return manifest
    _claim(out, settings)
    dtype = token_shards.dtype_for(tok.vocab_size)
    t0 = time.perf_counter()
    by_key: dict[str, dict[str, Any]] = {}
    for n, row in enumerate(_tokenize_rows(cfg, units, local), start=1):
        by_key[row["key"]] = row
        state = "already done" if row["skipped"] else f"{row['train_tokens']} + {row['validation_tokens']} tokens"
        log(f"tokenize {n}/{len(units)}: {row['uri']}: {state}")
    t1 = time.perf_counter()
    records = [by_key[u["key"]] for u in units]
    splits = {}
    _fresh_shards(out, digest)
    for split in token_shards.SPLITS:
        shards = pack_split(out, split, records, dtype, cfg.shard_tokens, log)
        splits[split] = SplitInfo(tuple(shards), sum(int(r[f"{split}_docs"]) for r in records))
    manifest = Manifest(
        directory=out,
        dtype=dtype,
        shard_tokens=cfg.shard_tokens,
        tokenizer=TokenizerInfo.of(tok),
        splits=splits,
        extra={
            "source": cfg.input,
            "format": cfg.format,
            "text_column": cfg.text_column,
            "validation_fraction": cfg.validation_fraction,
            "seed": cfg.seed,
            "units": len(units),
            "settings_digest": settings,
            "dataset_digest": digest,
            **split_bytes(records),
        },
    )
    token_shards.write_manifest(manifest)
    if timings is not None:
        timings.update(tokenize=t1 - t0, pack=time.perf_counter() - t1)
    if not cfg.keep_parts:
        shutil.rmtree(out / PARTS, ignore_errors=True)
    log(
        f"{out}: {manifest.total_tokens} tokens ({splits['train'].tokens} train, {splits['validation'].tokens} "
        f"validation) in {len(manifest.shards())} shards; tokenize {t1 - t0:.1f} s, pack {time.perf_counter() - t1:.1f} s"
    )
    return manifest
