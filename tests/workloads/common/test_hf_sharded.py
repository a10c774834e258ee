"""The Hugging Face import into a model sharded with FSDP2 (2 and 3 ranks, gloo, a process per
rank: hf_import_rank.py) is bitwise the whole model's import, and each rank's memory grows by
its own shard plus at most one whole tensor; the export from a sharded (DCP) checkpoint grows
by at most one output shard's source tensors plus one (converted) tensor (hf_export_peak.py).

Scaling argument: a rank allocates only its dim-0 rows of each parameter (``held`` = model/N)
and reads only those rows (query/key: the whole heads they overlap, less than one tensor), so
its peak is ``held + largest tensor`` however large the model; a whole load would be the model.
The large model here (~64M parameters, 256 MB in fp32) makes the whole model larger than the
bound at 2 ranks, so the bound separates a sharded read from a whole one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rigs.local_cluster import REPO_ROOT, free_port
from workloads.common import checkpoint as ckpt
from workloads.common import hf_llama
from workloads.common.model import Llama, LlamaConfig
from workloads.inference import loading

pytestmark = pytest.mark.slow  # process groups of real processes
HERE = Path(__file__).parent
MARGIN = 1.2
SMALL = LlamaConfig(block_size=64, vocab_size=300, n_layer=2, n_head=4, n_kv_head=2, n_embd=64, ffn_hidden=128)
# ~64M parameters (256 MB in fp32); its largest tensor (the embedding, or the head) is 33.5 MB.
LARGE = LlamaConfig(block_size=64, vocab_size=8192, n_layer=4, n_head=8, n_kv_head=4, n_embd=1024, ffn_hidden=2816)


def _tokenizer(tmp: Path) -> str:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(["some text to learn merges from"] * 10, trainers.BpeTrainer(vocab_size=280))
    path = tmp / "tokenizer.json"
    tok.save(str(path))
    return str(path)


def _export(config: LlamaConfig, out: Path, tokenizer: str, seed: int, **kw) -> Llama:
    torch.manual_seed(seed)
    model = Llama(config)
    hf_llama.export_hf(model.state_dict(), str(out), config=config, tokenizer_files=[tokenizer], **kw)
    return model


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hf")
    tok = _tokenizer(tmp)
    _export(SMALL, tmp / "small", tok, 1, max_shard_bytes=60_000)
    _export(SMALL, tmp / "small-bf16", tok, 2, max_shard_bytes=60_000, dtype=torch.bfloat16)
    large = _export(LARGE, tmp / "large", tok, 3, max_shard_bytes=64 << 20)
    path = tmp / "checkpoint_000000005"
    ckpt.save_sharded(str(path), {"model": large.state_dict()}, {"step": 5, "model_config": LARGE.to_dict()}).result()
    del large
    small_ckpt = tmp / "checkpoint_000000001"
    torch.manual_seed(4)
    ckpt.save_sharded(
        str(small_ckpt), {"model": Llama(SMALL).state_dict()}, {"step": 1, "model_config": SMALL.to_dict()}
    ).result()
    return {"tmp": tmp, "tokenizer": tok, "checkpoint": str(path), "small_checkpoint": str(small_ckpt)}


def _env() -> dict[str, str]:
    # A fixed mmap threshold: freed temporaries go back to the system, so resident memory
    # measures the tensors alive (glibc's adaptive threshold keeps freed 10 MB blocks resident).
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT), "MALLOC_MMAP_THRESHOLD_": str(1 << 20)}


def _start(world: int, folder: str, warmup: Path) -> list[subprocess.Popen]:
    port = free_port()
    return [
        subprocess.Popen(
            [sys.executable, str(HERE / "hf_import_rank.py"), str(r), str(world), str(port), folder, str(warmup)],
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(world)
    ]


def _ranks(world: int, folder: Path, warmup: Path) -> list[dict]:
    procs = _start(world, str(folder), warmup)
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=600)
        assert p.returncode == 0, out[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


@pytest.mark.parametrize(("world", "name"), [(2, "small"), (3, "small-bf16")])
def test_sharded_import_is_bitwise_the_whole_import(folders, world, name):
    """3 ranks split the query/key rows off head boundaries (64 rows in chunks of 22, heads of
    16), so the permutation of partial heads is exercised; the bf16 folder is cast on the way."""
    results = _ranks(world, folders["tmp"] / name, folders["tmp"] / "small")
    assert all(r["bitwise"] for r in results), results
    assert len({r["digest"] for r in results}) == 1
    assert sum(r["held"] for r in results) == results[0]["full"]


def test_ranks_reading_folders_that_differ_fail(folders):
    """Rank 0 reads the fp32 folder, rank 1 the bf16 one (the same model's shapes): both refuse."""
    tmp = folders["tmp"]
    procs = _start(2, f"{tmp / 'small'},{tmp / 'small-bf16'}", tmp / "small")
    for p in procs:
        out, _ = p.communicate(timeout=600)
        assert p.returncode != 0
        folder = tmp / ("small" if p is procs[0] else "small-bf16")
        assert f"HFFormatError: {folder}: the ranks read folders that differ: layouts " in out, out[-2000:]


@pytest.mark.parametrize("world", [2, 3])
def test_sharded_import_peak_is_one_shard_plus_one_tensor(folders, world):
    results = _ranks(world, folders["tmp"] / "large", folders["tmp"] / "small")
    for r in results:
        bound = r["held"] + r["largest"]
        print(
            f"world {world} rank {r['rank']}: import grew {r['growth'] / 2**20:.1f} MiB; shard {r['held'] / 2**20:.1f} "
            f"MiB + largest tensor {r['largest'] / 2**20:.1f} MiB = {bound / 2**20:.1f} MiB; ratio "
            f"{r['growth'] / bound:.3f}; whole model {r['full'] / 2**20:.1f} MiB"
        )
        assert r["growth"] <= MARGIN * bound
        assert r["growth"] >= 0.9 * r["held"]  # the shards were allocated in the measured window
    if world == 2:  # the bound is below the whole model, so a whole read would fail it
        assert MARGIN * (results[0]["held"] + results[0]["largest"]) < results[0]["full"]


def test_export_from_a_sharded_checkpoint_peak_is_one_shard(folders, tmp_path):
    max_shard = 48 << 20
    out = tmp_path / "export"
    cmd = [
        sys.executable,
        str(HERE / "hf_export_peak.py"),
        folders["checkpoint"],
        str(out),
        folders["tokenizer"],
        str(max_shard),
        folders["small_checkpoint"],
    ]
    done = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    growth = json.loads(done.stdout.strip().splitlines()[-1])["growth"]
    largest = LARGE.vocab_size * LARGE.n_embd * 4
    full = sum(p.numel() * 4 for p in Llama(LARGE).parameters())
    bound = max_shard + largest  # one group of source tensors, and one converted tensor
    print(
        f"export grew {growth / 2**20:.1f} MiB; one shard {max_shard / 2**20:.0f} MiB + largest tensor "
        f"{largest / 2**20:.1f} MiB = {bound / 2**20:.1f} MiB; ratio {growth / bound:.3f}; whole model {full / 2**20:.0f} MiB"
    )
    assert growth <= MARGIN * bound < full
    hf_llama.verify_export(str(out))
    back = Llama(LARGE)
    hf_llama.load_hf_into(back, str(out))
    ref = Llama(LARGE)
    loading.load_entry_into(folders["checkpoint"], "model", ref.state_dict())
    for name, p in ref.state_dict().items():
        assert torch.equal(back.state_dict()[name], p), name
