"""Training windows over a token dataset (workloads/common/token_shards.py), read per rank,
resumable, with memory that does not grow with the corpus.

The interface mirrors :class:`workloads.training.data.ByteWindows` so the trainer can switch:
windows of ``block_size + 1`` tokens at a stride of ``block_size`` (input = the first
``block_size``, target = the last ``block_size``), a position ``(epoch, cursor)`` counting
windows of the epoch's order, one global batch of ``world_size * batch_size`` windows per step
of which rank ``r`` takes the ``r``-th contiguous slice, and the tail of an epoch that does not
fill a global batch skipped (``next_batch`` moves on to the next epoch).

Windows lie within one shard: a shard of ``n`` tokens holds ``(n - 1) // block_size`` windows
and its last few tokens are not trained on (with 2**26-token shards and 2048-token blocks that
is under 0.004 %). Choose ``shard_tokens`` as a multiple of ``block_size`` plus one to lose none.

Shuffle (:class:`BlockShuffle`): a pure function of ``(seed, epoch, position)``, no table the
size of the corpus. The windows are cut into blocks of ``shuffle_block`` adjacent windows; the
block order is a keyed Feistel permutation of the block indices (4 rounds of a splitmix64 round
function, cycle-walking into ``[0, blocks)``), keyed by a hash of (seed, epoch); inside a block
the windows are in a seeded ``numpy`` permutation of ``shuffle_block`` entries. The last block
may be short; it sits wherever the Feistel puts it. A larger block means more adjacent reads and
less mixing (consecutive positions come from one region of ``shuffle_block * block_size``
tokens); the default 8 keeps a global batch drawn from many regions.

Reads are ``os.pread`` of each window into a fresh buffer, not a memory map: pages of a map
that were touched count in the process's RSS until the kernel reclaims them, so a map's RSS
grows towards the size of the corpus read; with ``pread`` the page cache (shared, reclaimable)
holds the file and the process holds one batch. bench/token_reader.py measures both.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from workloads.common.token_shards import DatasetError, Manifest, read_manifest, verify

_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)
_ROUNDS = 4


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer on uint64 arrays (wrapping arithmetic)."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    out: np.ndarray = x ^ (x >> np.uint64(31))
    return out


def _key(*parts: int) -> int:
    return int.from_bytes(hashlib.blake2b(repr(parts).encode(), digest_size=8).digest(), "little")


class FeistelPermutation:
    """A keyed bijection of ``[0, n)``: a balanced Feistel network on ``2 * half`` bits with
    cycle-walking (values at or above ``n`` are permuted again until they fall inside)."""

    def __init__(self, n: int, key: int) -> None:
        if n < 1:
            raise ValueError(f"permutation size {n}: allowed 1 or more")
        self.n = n
        self.half = max(1, ((n - 1).bit_length() + 1) // 2)
        self._mask = np.uint64((1 << self.half) - 1)
        self._keys = [np.uint64(_key(key, r)) for r in range(_ROUNDS)]

    def _f(self, r: np.ndarray, k: np.uint64) -> np.ndarray:
        out: np.ndarray = _mix(r ^ k) & self._mask
        return out

    def _forward(self, x: np.ndarray) -> np.ndarray:
        h = np.uint64(self.half)
        left, right = x >> h, x & self._mask
        for k in self._keys:
            left, right = right, left ^ self._f(right, k)
        return (left << h) | right

    def _backward(self, x: np.ndarray) -> np.ndarray:
        h = np.uint64(self.half)
        left, right = x >> h, x & self._mask
        for k in reversed(self._keys):
            left, right = right ^ self._f(left, k), left
        return (left << h) | right

    def _walk(self, x: np.ndarray, step: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        y = step(np.asarray(x, dtype=np.uint64))
        out = y >= np.uint64(self.n)
        while out.any():
            y[out] = step(y[out])
            out = y >= np.uint64(self.n)
        return y.astype(np.int64)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self._walk(x, self._forward)

    def inverse(self, y: np.ndarray) -> np.ndarray:
        return self._walk(y, self._backward)


class BlockShuffle:
    """The order of ``num_windows`` windows in an epoch (see the module docstring)."""

    def __init__(self, num_windows: int, seed: int, block: int = 8) -> None:
        if block < 1:
            raise ValueError(f"shuffle_block {block}: allowed 1 or more")
        self.n, self.seed, self.k = num_windows, seed, block
        self.blocks = -(-num_windows // block)
        self.last = num_windows - (self.blocks - 1) * block
        self._epoch = -1
        self._perm: FeistelPermutation | None = None
        self._short_at = 0
        self._inner: OrderedDict[int, np.ndarray] = OrderedDict()

    def _for_epoch(self, epoch: int) -> FeistelPermutation:
        if epoch != self._epoch or self._perm is None:
            self._perm = FeistelPermutation(self.blocks, _key(self.seed, epoch))
            self._short_at = int(self._perm.inverse(np.array([self.blocks - 1]))[0])
            self._inner.clear()
            self._epoch = epoch
        return self._perm

    def _inner_perm(self, epoch: int, block: int) -> np.ndarray:
        perm = self._inner.get(block)
        if perm is None:
            size = self.last if block == self.blocks - 1 else self.k
            rng = np.random.default_rng(np.random.SeedSequence([_key(self.seed, epoch, block)]))
            perm = rng.permutation(size)
            self._inner[block] = perm
            if len(self._inner) > 256:
                self._inner.popitem(last=False)
        return perm

    def __call__(self, epoch: int, positions: np.ndarray) -> np.ndarray:
        """The window index at each position (0 <= position < num_windows) of ``epoch``."""
        i = np.asarray(positions, dtype=np.int64)
        perm = self._for_epoch(epoch)
        k, q = self.k, self._short_at
        start = q * k
        before, short = i < start, (i >= start) & (i < start + self.last)
        after_i = i - start - self.last
        slot = np.where(before, i // k, np.where(short, q, q + 1 + after_i // k))
        offset = np.where(before, i % k, np.where(short, i - start, after_i % k))
        block = perm(slot)
        out = np.empty_like(i)
        for b in np.unique(block):
            sel = block == b
            out[sel] = b * k + self._inner_perm(epoch, int(b))[offset[sel]]
        return out


class Position(Protocol):
    """A data position such as ``workloads.training.data.DataPosition``."""

    epoch: int
    cursor: int


class TokenWindows:
    """Windows of ``block_size + 1`` tokens of one split of a token dataset.

    Opening reads the manifest, checks the tokenizer (when ``tokenizer_fingerprint`` is given)
    and every shard's size, and hashes the shards in ``verify_shards`` (e.g.
    ``token_shards.shards_for_rank(manifest, rank, world_size)``).
    """

    def __init__(
        self,
        directory: str | Path,
        *,
        block_size: int,
        seed: int,
        split: str = "train",
        shuffle_block: int = 8,
        tokenizer_fingerprint: str | None = None,
        verify_shards: Iterable[str] = (),
        max_open_files: int = 64,
    ) -> None:
        self.manifest: Manifest = read_manifest(directory)
        verify(self.manifest, shards=list(verify_shards), tokenizer_fingerprint=tokenizer_fingerprint)
        if split not in self.manifest.splits:
            raise DatasetError(
                f"dataset {self.manifest.directory}: no split {split!r}; allowed: {', '.join(self.manifest.splits)}"
            )
        if block_size < 1:
            raise DatasetError(f"block_size {block_size}: allowed 1 or more")
        self.block_size, self.seed, self.split = block_size, seed, split
        self._shards = self.manifest.splits[split].shards
        per_shard = np.array([max(0, (s.tokens - 1) // block_size) for s in self._shards], dtype=np.int64)
        self._ends = np.cumsum(per_shard)
        self.num_windows = int(self._ends[-1]) if len(per_shard) else 0
        if self.num_windows < 1:
            raise DatasetError(
                f"dataset {self.manifest.directory}: split {split!r} has {self.manifest.splits[split].tokens} tokens, "
                f"no window of {block_size + 1}; allowed: a split with at least {block_size + 1} tokens in one shard"
            )
        self.shuffle = BlockShuffle(self.num_windows, seed, shuffle_block)
        self._dtype = self.manifest.dtype.newbyteorder("<")
        self._fds: OrderedDict[int, int] = OrderedDict()
        self._max_open = max_open_files

    def _fd(self, shard: int) -> int:
        fd = self._fds.get(shard)
        if fd is None:
            fd = os.open(self.manifest.directory / self._shards[shard].name, os.O_RDONLY)
            self._fds[shard] = fd
            if len(self._fds) > self._max_open:
                os.close(self._fds.popitem(last=False)[1])
        else:
            self._fds.move_to_end(shard)
        return fd

    def close(self) -> None:
        while self._fds:
            os.close(self._fds.popitem()[1])

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def read(self, windows: np.ndarray) -> np.ndarray:
        """The tokens of each window index, shape ``[len(windows), block_size + 1]``, int64."""
        windows = np.asarray(windows, dtype=np.int64)
        shard = np.searchsorted(self._ends, windows, side="right")
        local = windows - np.where(shard > 0, self._ends[np.maximum(shard - 1, 0)], 0)
        width = self.block_size + 1
        size = self._dtype.itemsize
        out = np.empty((len(windows), width), dtype=np.int64)
        for row, (s, w) in enumerate(zip(shard.tolist(), local.tolist(), strict=True)):
            data = os.pread(self._fd(s), width * size, w * self.block_size * size)
            out[row] = np.frombuffer(data, dtype=self._dtype)
        return out

    def batch(
        self, epoch: int, cursor: int, rank: int, world_size: int, per_rank: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rank ``rank``'s (inputs, targets), int64 ``[per_rank, block_size]``, of the global batch
        at positions ``[cursor, cursor + world_size * per_rank)`` of ``epoch``'s order."""
        if not 0 <= rank < world_size:
            raise DatasetError(f"rank {rank}: allowed 0 to world_size - 1 = {world_size - 1}")
        if per_rank < 1:
            raise DatasetError(f"per_rank {per_rank}: allowed 1 or more")
        global_batch = world_size * per_rank
        if cursor < 0 or cursor + global_batch > self.num_windows:
            raise DatasetError(
                f"cursor {cursor}: a global batch of {global_batch} windows must lie within the "
                f"{self.num_windows} windows of split {self.split!r}; allowed: 0 to {self.num_windows - global_batch}"
            )
        positions = cursor + rank * per_rank + np.arange(per_rank, dtype=np.int64)
        tokens = torch.from_numpy(self.read(self.shuffle(epoch, positions)))
        return tokens[:, :-1], tokens[:, 1:]

    def next_batch(
        self, pos: Position, *, rank: int, world_size: int, batch_size: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """As ``ByteWindows.next_batch``: this rank's batch at ``pos``, then ``pos`` advances by one
        global batch (to the next epoch when the rest of this one cannot fill a global batch)."""
        global_batch = batch_size * world_size
        if global_batch > self.num_windows:
            raise DatasetError(f"global batch {global_batch} exceeds the {self.num_windows} windows of the corpus")
        if pos.cursor + global_batch > self.num_windows:
            pos.epoch, pos.cursor = pos.epoch + 1, 0
        out = self.batch(pos.epoch, pos.cursor, rank, world_size, batch_size)
        pos.cursor += global_batch
        return out

    def eval_batches(
        self, rank: int, world_size: int, per_rank: int, max_batches: int | None = None
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """For evaluation (e.g. the ``validation`` split): the windows in order, no shuffle, one
        global batch at a time of which this rank reads its slice; at most ``max_batches``; the
        tail that does not fill a global batch is left out, so every rank runs as many batches."""
        if not 0 <= rank < world_size:
            raise DatasetError(f"rank {rank}: allowed 0 to world_size - 1 = {world_size - 1}")
        global_batch = world_size * per_rank
        steps = self.num_windows // global_batch
        if max_batches is not None:
            steps = min(steps, max_batches)
        for step in range(steps):
            start = step * global_batch + rank * per_rank
            tokens = torch.from_numpy(self.read(np.arange(start, start + per_rank, dtype=np.int64)))
            yield tokens[:, :-1], tokens[:, 1:]
