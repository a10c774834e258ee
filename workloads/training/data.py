"""The job's data: windows of tokens, a resumable position in them, and held-out windows.

Two sources, one interface (``next_batch(pos, rank=, world_size=, batch_size=)``):

- ``training.dataset_path`` set: a pre-tokenized dataset (workloads/common/token_shards.py, as
  the pretokenize workload writes it), read with :class:`TokenWindows` from its ``train`` split;
  the held-out windows are the first ones of its ``validation`` split. ``open_data`` checks it
  before the first step (``check_dataset`` on the driver too): complete, every shard's size, the
  tokenizer's fingerprint against ``training.tokenizer`` and its vocabulary against
  ``model.vocab_size``; the shards' SHA-256 spread over the ranks
  (``token_shards.shards_for_rank``), and every rank raises the same one error when any fails.
- otherwise raw text as byte tokens (:class:`ByteWindows`): each worker reads the same corpus,
  cuts it into windows of ``block_size + 1`` bytes, and walks a seeded permutation of them; with
  evaluation on, the corpus's last windows are held out of training.

Either way each step reads one global batch, of which each rank takes its slice. The position
(epoch, cursor) goes into every checkpoint, so a resumed run reads exactly the batches an
uninterrupted run would have read.
"""

from __future__ import annotations

import os
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from workloads.common import storage
from workloads.common.token_shards import DatasetError, Manifest, read_manifest, shards_for_rank, verify
from workloads.common.token_windows import TokenWindows

if TYPE_CHECKING:
    from config.job_settings import JobSettings

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
    """Windows of a raw-text corpus as byte tokens; the last ``held_out`` windows are not
    trained on (:meth:`held_out_windows` reads them)."""

    def __init__(self, corpus: bytes, block_size: int, seed: int, *, held_out: int = 0):
        self.tokens = torch.frombuffer(bytearray(corpus), dtype=torch.uint8).long()
        self.block_size = block_size
        self.seed = seed
        total = (len(self.tokens) - 1) // block_size
        if held_out and held_out * 2 > total:
            raise ValueError(
                f"training.eval_batches: {held_out} held-out windows of {block_size + 1} bytes are more than "
                f"half of the corpus's {total} windows; allowed: fewer eval_batches, or more data_max_bytes"
            )
        self.num_windows = total - held_out
        self.held_out = held_out
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

    def held_out_windows(self, indices: np.ndarray) -> torch.Tensor:
        """The held-out windows ``indices`` (0 to held_out - 1), ``[len, block_size + 1]``."""
        idx = torch.from_numpy(np.asarray(indices, dtype=np.int64)) + self.num_windows
        return self.tokens[idx[:, None] * self.block_size + torch.arange(self.block_size + 1)]


class Windows(Protocol):
    def next_batch(
        self, pos: DataPosition, *, rank: int, world_size: int, batch_size: int
    ) -> tuple[torch.Tensor, torch.Tensor]: ...


@dataclass
class HeldOut:
    """Fixed held-out windows for evaluation: ``count`` windows read by ``read(indices)``, and
    the UTF-8 bytes per token of their text (None where the dataset does not record it), for
    bits per byte."""

    count: int
    read: Any  # Callable[[np.ndarray], torch.Tensor]: [len(indices), block_size + 1] int64
    bytes_per_token: float | None


@dataclass
class Data:
    train: Windows
    held_out: HeldOut | None


def held_out_count(s: JobSettings) -> int:
    """Windows of one evaluation: ``eval_batches`` global batches of the configured workers (not
    the current world size: the same windows after an elastic resize); 0 with evaluation off."""
    return s.eval_batches * s.batch_size_per_worker * s.num_workers if s.eval_every_steps else 0


def tokenizer_fingerprint(spec: str) -> str:
    from workloads.common.tokenizer import load_tokenizer

    return load_tokenizer(spec).fingerprint


def check_dataset(directory: str, *, tokenizer: str, vocab_size: int, fingerprint: str | None = None) -> Manifest:
    """The dataset at ``directory`` against the job's settings, without hashing shards:
    complete (its manifest), every shard present at its size, made with ``tokenizer``
    (``fingerprint``, when already known), ids within the model's ``vocab_size``, both splits
    there. Raises DatasetError naming the setting, the value and what is allowed."""
    manifest = read_manifest(directory)
    have = manifest.tokenizer.vocab_size
    if have > vocab_size:
        raise DatasetError(
            f"training.model.vocab_size: {vocab_size} rows of the embedding, but dataset {directory} was tokenized "
            f"with a tokenizer of {have} ids; allowed: model.vocab_size {have} or more (or a dataset of a smaller "
            "tokenizer)"
        )
    try:
        fp = fingerprint or tokenizer_fingerprint(tokenizer)
    except ValueError as err:
        raise DatasetError(f"training.tokenizer {tokenizer!r}: {err}") from None
    verify(manifest, shards=[], tokenizer_fingerprint=fp)
    missing = [split for split in ("train", "validation") if split not in manifest.splits]
    if missing:
        raise DatasetError(
            f"training.dataset_path: dataset {directory} has no {' or '.join(missing)} split; allowed: a dataset "
            "with train and validation splits (as the pretokenize workload writes)"
        )
    return manifest


def _agreed(problem: str | None) -> None:
    """Every rank raises the same error when any rank found one (a rank that went on alone
    would wait forever in the first collective)."""
    import torch.distributed as dist

    problems: list[str | None] = [problem]
    if dist.is_available() and dist.is_initialized():
        problems = [None] * dist.get_world_size()
        group = dist.new_group(backend="gloo")
        dist.all_gather_object(problems, problem, group=group)
        dist.destroy_process_group(group)
    found = [p for p in problems if p]
    if found:
        raise DatasetError(found[0])


def open_data(s: JobSettings, *, rank: int, world: int, block_size: int, vocab_size: int) -> Data:
    """The training windows and the held-out windows of ``s`` for rank ``rank`` of ``world``."""
    count = held_out_count(s)
    if s.dataset_path is None:
        corpus = ByteWindows(load_corpus(s.data_path, s.data_max_bytes), block_size, s.seed, held_out=count)
        return Data(corpus, HeldOut(count, corpus.held_out_windows, 1.0) if count else None)
    problem, train, validation = None, None, None
    try:
        fp = tokenizer_fingerprint(s.tokenizer)
        manifest = check_dataset(s.dataset_path, tokenizer=s.tokenizer, vocab_size=vocab_size, fingerprint=fp)
        mine = shards_for_rank(manifest, rank, world)
        train = TokenWindows(
            s.dataset_path, block_size=block_size, seed=s.seed, tokenizer_fingerprint=fp, verify_shards=mine
        )
        if count:
            validation = TokenWindows(s.dataset_path, block_size=block_size, seed=s.seed, split="validation")
            if validation.num_windows < count:
                fit = validation.num_windows // (count // s.eval_batches)
                raise DatasetError(
                    f"training.eval_batches: {s.eval_batches} batches of {count // s.eval_batches} windows need "
                    f"{count} windows of {block_size + 1} tokens, but the validation split of {s.dataset_path} "
                    f"has {validation.num_windows}; allowed: "
                    + (f"eval_batches {fit} or fewer, or " if fit else "")
                    + "a larger validation split (pretokenize's validation fraction)"
                )
    except (DatasetError, ValueError, OSError) as err:
        problem = str(err)
    _agreed(problem)
    assert train is not None
    if validation is None:
        return Data(train, None)
    v = validation
    split_bytes = v.manifest.extra.get("split_bytes", {}).get("validation")
    tokens = v.manifest.splits["validation"].tokens
    per_token = split_bytes / tokens if split_bytes and tokens else None
    return Data(train, HeldOut(count, lambda idx: torch.from_numpy(v.read(idx)), per_token))
