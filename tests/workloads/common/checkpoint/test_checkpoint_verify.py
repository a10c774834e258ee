"""A restart's checkpoint search spread over the ranks (``checkpoint.find_latest_valid_sharded``,
one process per rank, gloo, no Ray): each rank hashes the shard files it will read, rank 0 no
longer hashes everything, and a torn shard that only rank 1 reads still makes every rank fall
back to the previous checkpoint together."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rigs.local_cluster import REPO_ROOT, free_port
from workloads.common import checkpoint as ck

pytestmark = pytest.mark.slow  # process groups of real processes
HERE = Path(__file__).parent


def _run_ranks(script: str, world: int, *args: str) -> list[str]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, str(HERE / script), str(r), str(world), str(port), *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(world)
    ]
    outs = []
    for p in procs:
        out, _ = p.communicate(timeout=180)
        assert p.returncode == 0, out[-3000:]
        outs.append(out)
    return outs


def _verify(storage: Path, world: int, tmp_path: Path, *extra: str) -> list[dict]:
    outs = [tmp_path / f"rank{r}.json" for r in range(world)]
    _run_ranks("sharded_verifier.py", world, str(storage), "run", str(tmp_path / "rank{}.json"), *extra)
    return [json.loads(o.read_text()) for o in outs]


@pytest.fixture(scope="module")
def two_saves(tmp_path_factory):
    """Checkpoints after steps 10 and 20 of a 2-rank FSDP2 model."""
    storage = tmp_path_factory.mktemp("verify")
    _run_ranks("sharded_saver.py", 2, str(storage / "run"), "10,20")
    return storage


def _sizes(checkpoint: Path) -> dict[str, int]:
    return {n: e["size"] for n, e in json.loads((checkpoint / ck.MANIFEST).read_text())["files"].items()}


def test_each_rank_hashes_only_the_shards_it_reads(two_saves, tmp_path):
    ranks = _verify(two_saves, 2, tmp_path)
    sizes = _sizes(two_saves / "run" / ck.dir_name(20))
    shards = sum(s for n, s in sizes.items() if n.endswith(".distcp"))
    assert [r["step"] for r in ranks] == [20, 20]
    assert [r["loaded_step"] for r in ranks] == [20, 20]
    rank0, rank1 = (r["verified"][ck.dir_name(20)] for r in ranks)
    # Rank 0 no longer hashes the shard rank 1 wrote and reads; every shard is hashed once.
    assert "__1_0.distcp" in rank1 and "__1_0.distcp" not in rank0
    assert sorted(rank0 + rank1) == ["__0_0.distcp", "__1_0.distcp"]
    # Bytes hashed, counted at hashlib: each rank its shards and .metadata, rank 0 meta.json too.
    assert ranks[0]["hashed_bytes"] == sum(sizes[n] for n in rank0) + sizes[".metadata"] + sizes["meta.json"]
    assert ranks[1]["hashed_bytes"] == sum(sizes[n] for n in rank1) + sizes[".metadata"]
    assert ranks[0]["hashed_bytes"] < shards


def test_torn_shard_read_by_rank_1_makes_every_rank_fall_back(two_saves, tmp_path):
    storage = tmp_path / "storage"
    shutil.copytree(two_saves, storage)
    shard = storage / "run" / ck.dir_name(20) / "__1_0.distcp"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size: only the hash finds it
    shard.write_bytes(bytes(data))
    ranks = _verify(storage, 2, tmp_path)
    assert "__1_0.distcp" in ranks[1]["verified"][ck.dir_name(20)]
    assert "__1_0.distcp" not in ranks[0]["verified"][ck.dir_name(20)]
    assert [r["step"] for r in ranks] == [10, 10]
    assert [r["loaded_step"] for r in ranks] == [10, 10]


def test_more_ranks_than_shards_still_hash_every_file_once(two_saves, tmp_path):
    """A 2-rank checkpoint resumed on 3 ranks (DCP reshards): every shard is hashed by one rank
    that reads it, the rest hash none."""
    ranks = _verify(two_saves, 3, tmp_path)
    assert [r["step"] for r in ranks] == [20, 20, 20]
    verified = [r["verified"][ck.dir_name(20)] for r in ranks]
    assert sorted(n for v in verified for n in v) == ["__0_0.distcp", "__1_0.distcp"]


def test_checkpoint_of_another_model_fails_on_every_rank(two_saves, tmp_path):
    ranks = _verify(two_saves, 2, tmp_path, "3")
    for r in ranks:
        assert r["error"].startswith(f"checkpoint {two_saves / 'run' / ck.dir_name(20)} cannot be loaded")
        assert "step" not in r


def test_assign_files_balances_bytes_over_readers():
    readers = [{"a", "b", "c"}, {"b"}, {"a", "c"}, set()]
    out = ck.assign_files({"a": 10, "b": 10, "c": 10, "d": 1}, readers)
    # Each file to one of its readers, the least loaded; "d" (read by nobody) to the least loaded rank.
    assert out == [["a"], ["b"], ["c"], ["d"]]
