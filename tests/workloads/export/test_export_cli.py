"""``python -m workloads.export``: a verified sharded (DCP) checkpoint streamed to a Hugging Face
folder, verified after writing; a torn checkpoint or a missing tokenizer exits 2 naming it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rigs.local_cluster import REPO_ROOT
from workloads.common import checkpoint as ckpt
from workloads.common import hf_llama
from workloads.common.model import Llama, LlamaConfig
from workloads.export.__main__ import main

CONFIG = LlamaConfig(block_size=64, vocab_size=300, n_layer=2, n_head=4, n_kv_head=2, n_embd=64, ffn_hidden=128)


@pytest.fixture
def checkpoint(tmp_path) -> tuple[str, Llama]:
    torch.manual_seed(7)
    model = Llama(CONFIG)
    path = str(tmp_path / "checkpoint_000000009")
    ckpt.save_sharded(path, {"model": model.state_dict()}, {"step": 9, "model_config": CONFIG.to_dict()}).result()
    return path, model


@pytest.fixture
def tokenizer(tmp_path) -> str:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(["text for merges"] * 10, trainers.BpeTrainer(vocab_size=280, special_tokens=["<|eot|>"]))
    folder = tmp_path / "tok"
    folder.mkdir()
    tok.save(str(folder / "tokenizer.json"))
    return str(folder)


def test_export_cli_writes_a_verified_folder(checkpoint, tokenizer, tmp_path):
    path, model = checkpoint
    out = tmp_path / "hf"
    args = ["--checkpoint", path, "--out", str(out), "--tokenizer", tokenizer, "--max-shard-bytes", "50000"]
    done = subprocess.run(
        [sys.executable, "-m", "workloads.export", *args, "--eos-token-id", "0"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["files"] == hf_llama.verify_export(str(out))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["source"]["step"] == 9 and manifest["dtype"] == "bfloat16"
    assert json.loads((out / "tokenizer_config.json").read_text())["eos_token"] == "<|eot|>"
    assert json.loads((out / "generation_config.json").read_text())["eos_token_id"] == 0
    back = Llama(CONFIG)
    hf_llama.load_hf_into(back, str(out))
    for name, p in model.state_dict().items():
        assert torch.equal(back.state_dict()[name], p.to(torch.bfloat16).float()), name


def test_torn_checkpoint_exits_2_and_writes_nothing(checkpoint, tokenizer, tmp_path, capsys):
    path, _ = checkpoint
    shard = Path(path, "__0_0.distcp")
    data = bytearray(shard.read_bytes())
    data[100] ^= 0xFF
    shard.write_bytes(bytes(data))
    out = tmp_path / "hf"
    assert main(["--checkpoint", path, "--out", str(out), "--tokenizer", tokenizer]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"export failed: checkpoint {path} is torn or corrupt: ")
    assert "__0_0.distcp" in err
    assert not out.exists()


def test_missing_tokenizer_is_named(checkpoint, tmp_path, capsys):
    path, _ = checkpoint
    missing = str(tmp_path / "nope.json")
    assert main(["--checkpoint", path, "--out", str(tmp_path / "hf"), "--tokenizer", missing]) == 2
    assert capsys.readouterr().err == (
        f"export failed: --tokenizer {missing}: no such file or folder; allowed: a tokenizer.json or a folder holding one\n"
    )


def _run_checkpoints(tmp_path) -> tuple[Path, dict[int, Llama]]:
    """Run ``r`` under ``tmp_path/storage`` with checkpoints of steps 3 and 6 (other weights)."""
    storage, models = tmp_path / "storage", {}
    for step in (3, 6):
        torch.manual_seed(step)
        models[step] = Llama(CONFIG)
        meta = {"step": step, "model_config": CONFIG.to_dict()}
        ckpt.save_sharded(str(storage / "r" / ckpt.dir_name(step)), {"model": models[step].state_dict()}, meta).result()
    return storage, models


def _same(out: Path, model: Llama) -> bool:
    back = Llama(CONFIG)
    hf_llama.load_hf_into(back, str(out))
    return all(torch.equal(back.state_dict()[k], v) for k, v in model.state_dict().items())


def test_a_runs_newest_verified_checkpoint_or_a_step_is_exported_and_replaced(tmp_path):
    storage, models = _run_checkpoints(tmp_path)
    out = tmp_path / "export"
    base = [
        "--storage",
        str(storage),
        "--run-name",
        "r",
        "--out",
        str(out),
        "--tokenizer",
        "bytes",
        "--dtype",
        "float32",
    ]
    assert main(base) == 0
    assert _same(out, models[6])
    assert json.loads((out / "manifest.json").read_text())["source"]["step"] == 6
    # Step 3 on demand replaces the earlier export, which is kept next to it.
    assert main([*base, "--step", "3", "--replace"]) == 0
    assert _same(out, models[3]) and _same(Path(f"{out}.previous"), models[6])
    assert not Path(f"{out}.partial").exists()
    # The newest checkpoint torn: the one before it is the newest verified.
    shard = storage / "r" / ckpt.dir_name(6) / "__0_0.distcp"
    data = bytearray(shard.read_bytes())
    data[100] ^= 0xFF
    shard.write_bytes(bytes(data))
    assert main([*base, "--replace"]) == 0
    assert _same(out, models[3])


def test_a_step_without_a_checkpoint_is_named(tmp_path, capsys):
    storage, _ = _run_checkpoints(tmp_path)
    args = ["--storage", str(storage), "--run-name", "r", "--step", "4", "--out", str(tmp_path / "o")]
    assert main([*args, "--tokenizer", "bytes"]) == 2
    assert capsys.readouterr().err == (
        f"export failed: --step 4: run 'r' under {storage} has no checkpoint of step 4\n"
    )


def test_byte_tokens_export_as_a_tokenizer_transformers_reads(tmp_path):
    import transformers

    storage, _ = _run_checkpoints(tmp_path)
    out = tmp_path / "export"
    assert main(["--storage", str(storage), "--run-name", "r", "--out", str(out), "--tokenizer", "bytes"]) == 0
    tok = transformers.AutoTokenizer.from_pretrained(str(out))
    text = "héllo, wörld\n"
    assert tok(text, add_special_tokens=False)["input_ids"] == list(text.encode())
    assert tok.decode(list(text.encode())) == text
    assert json.loads((out / "generation_config.json").read_text())["eos_token_id"] == 0
