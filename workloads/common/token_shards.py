"""A tokenized dataset on disk: fixed-size token shards and a manifest written last.

Layout of a dataset directory (local, FSx)::

    manifest.json                   # written last, atomically: its presence means "complete"
    train/shard-00000.bin           # raw little-endian token ids, uint16 (vocab <= 65535) or uint32
    train/shard-00001.bin
    validation/shard-00000.bin

Each document's tokens are followed by the tokenizer's EOS id; documents run on across shard
boundaries. Every shard of a split holds exactly ``shard_tokens`` tokens except the split's last.
The manifest (``FORMAT``, version 1)::

    {"format": "hpray-token-shards", "version": 1, "dtype": "uint16", "shard_tokens": N,
     "tokenizer": {"kind": "huggingface", "fingerprint": "<sha256 of tokenizer.json>",
                   "vocab_size": V, "eos_id": E, "bos_id": B | null},
     "splits": {"train": {"tokens": T, "documents": D,
                          "shards": [{"name": "train/shard-00000.bin", "tokens": n,
                                      "bytes": b, "sha256": "<hex>"}, ...]},
                "validation": {...}},
     "total_tokens": T_train + T_validation}

:func:`verify` checks every shard's size (cheap, always) and the SHA-256 of the shards it is
given (:func:`shards_for_rank` spreads them over ranks), and that the dataset was made with the
configured tokenizer; a problem is one :class:`DatasetError` naming the shard, what was found
and what the manifest says.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# The manifest's format; hpray reads it too, as config.pretokenize.TOKEN_SHARDS_FORMAT (the runtime
# reader imports no config: the GPU bench runs it without pydantic; a test ties the two).
FORMAT = "hpray-token-shards"
VERSION = 1
MANIFEST = "manifest.json"
SPLITS = ("train", "validation")
_HASH_CHUNK = 8 << 20


class DatasetError(ValueError):
    """A token dataset that cannot be read as it is: incomplete, torn, changed or of another tokenizer."""


def dtype_for(vocab_size: int) -> np.dtype:
    """uint16 when every id fits (vocab <= 65535), else uint32."""
    return np.dtype(np.uint16) if vocab_size <= 65535 else np.dtype(np.uint32)


def shard_name(split: str, index: int) -> str:
    return f"{split}/shard-{index:05d}.bin"


@dataclass(frozen=True)
class ShardInfo:
    name: str
    tokens: int
    bytes: int
    sha256: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "tokens": self.tokens, "bytes": self.bytes, "sha256": self.sha256}


@dataclass(frozen=True)
class TokenizerInfo:
    kind: str
    fingerprint: str
    vocab_size: int
    eos_id: int
    bos_id: int | None

    @classmethod
    def of(cls, tokenizer: Any) -> TokenizerInfo:
        """From a :class:`workloads.common.tokenizer.Tokenizer`."""
        return cls(tokenizer.kind, tokenizer.fingerprint, tokenizer.vocab_size, tokenizer.eos_id, tokenizer.bos_id)


@dataclass(frozen=True)
class SplitInfo:
    shards: tuple[ShardInfo, ...]
    documents: int

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.shards)


@dataclass(frozen=True)
class Manifest:
    directory: Path
    dtype: np.dtype
    shard_tokens: int
    tokenizer: TokenizerInfo
    splits: dict[str, SplitInfo]
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def total_tokens(self) -> int:
        return sum(s.tokens for s in self.splits.values())

    def shards(self, split: str | None = None) -> list[ShardInfo]:
        names = SPLITS if split is None else (split,)
        return [s for n in names if n in self.splits for s in self.splits[n].shards]

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "dtype": self.dtype.name,
            "shard_tokens": self.shard_tokens,
            "tokenizer": {
                "kind": self.tokenizer.kind,
                "fingerprint": self.tokenizer.fingerprint,
                "vocab_size": self.tokenizer.vocab_size,
                "eos_id": self.tokenizer.eos_id,
                "bos_id": self.tokenizer.bos_id,
            },
            "splits": {
                name: {"tokens": s.tokens, "documents": s.documents, "shards": [x.to_dict() for x in s.shards]}
                for name, s in self.splits.items()
            },
            "total_tokens": self.total_tokens,
            **({"extra": self.extra} if self.extra else {}),
        }


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so a reader sees the old file or the whole new one: a temp file
    in the same directory, fsync, rename over ``path``, fsync the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def write_shard(directory: Path, name: str, tokens: np.ndarray) -> ShardInfo:
    """Write one shard atomically; its :class:`ShardInfo` (digest of the bytes written)."""
    data = np.ascontiguousarray(tokens).astype(tokens.dtype.newbyteorder("<"), copy=False).tobytes()
    atomic_write(Path(directory) / name, data)
    return ShardInfo(name, int(tokens.size), len(data), hashlib.sha256(data).hexdigest())


def write_manifest(manifest: Manifest) -> Path:
    """Write ``manifest.json`` atomically (call it after every shard is written)."""
    path = manifest.directory / MANIFEST
    atomic_write(path, (json.dumps(manifest.to_dict(), indent=1) + "\n").encode())
    return path


class ShardWriter:
    """Appends token arrays to one split's fixed-size shards, writing each shard when full."""

    def __init__(self, directory: str | Path, split: str, dtype: np.dtype, shard_tokens: int) -> None:
        if shard_tokens < 2:
            raise DatasetError(f"shard_tokens {shard_tokens}: allowed 2 or more")
        self.directory, self.split, self.dtype, self.shard_tokens = (
            Path(directory),
            split,
            np.dtype(dtype),
            shard_tokens,
        )
        self.shards: list[ShardInfo] = []
        self._buf = np.empty(shard_tokens, dtype=self.dtype)
        self._fill = 0

    def append(self, tokens: np.ndarray) -> None:
        tokens = np.asarray(tokens)
        while tokens.size:
            take = min(tokens.size, self.shard_tokens - self._fill)
            self._buf[self._fill : self._fill + take] = tokens[:take]
            self._fill += take
            tokens = tokens[take:]
            if self._fill == self.shard_tokens:
                self._flush()

    def _flush(self) -> None:
        name = shard_name(self.split, len(self.shards))
        self.shards.append(write_shard(self.directory, name, self._buf[: self._fill]))
        self._fill = 0

    def close(self) -> list[ShardInfo]:
        if self._fill:
            self._flush()
        return self.shards


def read_manifest(directory: str | Path) -> Manifest:
    """The manifest of the dataset at ``directory``; DatasetError if it is absent or malformed."""
    directory = Path(directory)
    path = directory / MANIFEST
    if not path.is_file():
        raise DatasetError(
            f"dataset {directory}: no {MANIFEST}, so the dataset is not complete "
            "(pretokenize writes the manifest after the last shard)"
        )
    try:
        raw = json.loads(path.read_text())
        if raw.get("format") != FORMAT or raw.get("version") != VERSION:
            raise DatasetError(
                f"dataset {directory}: {MANIFEST} has format {raw.get('format')!r} version {raw.get('version')!r}; "
                f"allowed: {FORMAT!r} version {VERSION}"
            )
        tok = raw["tokenizer"]
        return Manifest(
            directory=directory,
            dtype=np.dtype(raw["dtype"]),
            shard_tokens=int(raw["shard_tokens"]),
            tokenizer=TokenizerInfo(
                str(tok["kind"]), str(tok["fingerprint"]), int(tok["vocab_size"]), int(tok["eos_id"]), tok["bos_id"]
            ),
            splits={
                name: SplitInfo(
                    tuple(
                        ShardInfo(str(s["name"]), int(s["tokens"]), int(s["bytes"]), str(s["sha256"]))
                        for s in split["shards"]
                    ),
                    int(split["documents"]),
                )
                for name, split in raw["splits"].items()
            },
            extra=raw.get("extra", {}),
        )
    except (AttributeError, KeyError, TypeError, ValueError) as err:
        if isinstance(err, DatasetError):
            raise
        raise DatasetError(f"dataset {directory}: {MANIFEST} is malformed ({type(err).__name__}: {err})") from err


def shards_for_rank(manifest: Manifest, rank: int, world_size: int) -> list[str]:
    """The shard names rank ``rank`` of ``world_size`` hashes in :func:`verify`: every
    ``world_size``-th shard (of all splits), so together the ranks hash each shard once."""
    return [s.name for s in manifest.shards()[rank::world_size]]


def verify(
    manifest: Manifest,
    *,
    shards: Iterable[str] | None = None,
    tokenizer_fingerprint: str | None = None,
) -> None:
    """Check the dataset against its manifest: the tokenizer (when ``tokenizer_fingerprint`` is
    given), every shard's presence and size, and the SHA-256 of ``shards`` (None: all of them).
    Raises :class:`DatasetError` with the first problem found."""
    d = manifest.directory
    if tokenizer_fingerprint is not None and tokenizer_fingerprint != manifest.tokenizer.fingerprint:
        raise DatasetError(
            f"dataset {d} was tokenized with tokenizer {manifest.tokenizer.fingerprint[:16]} "
            f"(vocab {manifest.tokenizer.vocab_size}), not the configured tokenizer {tokenizer_fingerprint[:16]}: "
            "pretokenize the corpus with this tokenizer or configure the dataset's"
        )
    every = manifest.shards()
    for s in every:
        path = d / s.name
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            raise DatasetError(f"dataset {d}: shard {s.name} is missing (the manifest lists {s.bytes} bytes)") from None
        if size != s.bytes:
            raise DatasetError(
                f"dataset {d}: shard {s.name} has {size} bytes, the manifest says {s.bytes} (a torn or partial copy)"
            )
    by_name = {s.name: s for s in every}
    wanted = list(by_name) if shards is None else list(shards)
    for name in wanted:
        if name not in by_name:
            raise DatasetError(
                f"dataset {d}: shard {name} is not in the manifest; allowed: a name under splits.*.shards "
                f"such as {every[0].name if every else 'train/shard-00000.bin'}"
            )
        digest = sha256_file(d / name)
        if digest != by_name[name].sha256:
            raise DatasetError(
                f"dataset {d}: shard {name} has sha256 {digest}, the manifest says {by_name[name].sha256} "
                "(the shard changed after it was written)"
            )
