"""``training.init_from``: a fresh run starts from a Hugging Face folder's weights, each rank
reading its own shard over the run's gloo group (init_from_rank.py, a process per rank, no Ray);
its logits are transformers' for the same folder; the checkpoints' meta records the folder and
its digest; a resumed run keeps its checkpoint's record and reads nothing; a folder of another
shape stops the start naming both. The config side: the HF presets, and a shape declared next to
one that the folder cannot have."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from config.training import PRESETS, Training
from rigs.local_cluster import REPO_ROOT, free_port
from workloads.common import hf_llama
from workloads.common.model import Llama, LlamaConfig

RANK = Path(__file__).with_name("init_from_rank.py")
ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 16,
}
MODEL = {
    "arch": "llama",
    "n_layer": 2,
    "n_head": 4,
    "n_kv_head": 2,
    "n_embd": 64,
    "ffn_hidden": 128,
    "block_size": 64,
    "vocab_size": 300,
    "rope_scaling": ROPE,
}


def _tokenizer(tmp: Path) -> str:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(["some text to learn merges from"] * 10, trainers.BpeTrainer(vocab_size=280))
    path = tmp / "tokenizer.json"
    tok.save(str(path))
    return str(path)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("init-from")
    config = LlamaConfig.from_dict(MODEL)
    torch.manual_seed(7)
    model = Llama(config)
    out = tmp / "hf"
    hf_llama.export_hf(
        model.state_dict(), str(out), config=config, tokenizer_files=[_tokenizer(tmp)], max_shard_bytes=60_000
    )
    return out


def _ranks(world: int, folder: str, model: dict) -> list[dict]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, str(RANK), str(r), str(world), str(port), folder, json.dumps(model)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(world)
    ]
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0, out[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


@pytest.mark.slow
def test_a_fresh_run_starts_from_the_hf_weights_and_a_resume_ignores_them(folder):
    import transformers

    results = _ranks(2, str(folder), MODEL)
    digest = hf_llama.load_hf_into(Llama(LlamaConfig.from_dict(MODEL)), str(folder))
    for r in results:
        assert r["record"] == {"path": str(folder), "digest": digest}
        # Resumed: the checkpoint's record, and the folder (which does not exist) is not read.
        assert r["resumed_record"] == r["record"]
    whole = sum(p.numel() for p in Llama(LlamaConfig.from_dict(MODEL)).parameters())
    assert sum(r["held"] for r in results) == whole and all(r["held"] < whole for r in results)
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    x = torch.arange(24).reshape(2, 12) % MODEL["vocab_size"]
    with torch.no_grad():
        want = hf(x).logits
    got = torch.tensor(results[0]["logits"])
    assert torch.allclose(got, want, atol=1e-4), (got - want).abs().max()


@pytest.mark.slow
def test_a_folder_of_another_shape_stops_the_start_naming_both(folder):
    results = _ranks(2, str(folder), {**MODEL, "n_layer": 3})
    for r in results:
        assert r["error"] == (
            f"training.init_from: {folder / 'config.json'}: n_layer is 2, the model's is 3; they must match"
        )


def test_hf_presets_are_presets_of_the_job_with_the_real_vocabulary():
    t = Training(model={"preset": "llama-3.1-8b"}, init_from="/fsx/models/Llama-3.1-8B")
    arch = t.model.architecture()
    assert arch["vocab_size"] == 128256 and arch["rope_scaling"]["factor"] == 8.0
    assert t.model.parameters() == PRESETS["llama-3.1-8b"]["params"] == 8_030_261_248
    assert hf_llama.preset_config("llama-3.1-8b").n_layer == arch["n_layer"]


def test_a_shape_declared_next_to_an_hf_preset_is_a_config_error():
    with pytest.raises(ValueError) as err:
        Training(model={"preset": "llama-3.2-1b", "n_kv_head": 4}, init_from="/fsx/models/Llama-3.2-1B")
    assert (
        "training.model.n_kv_head: 4 declared next to preset 'llama-3.2-1b', whose n_kv_head is 8; "
        "training.init_from (/fsx/models/Llama-3.2-1B) holds the preset's shape; allowed: 8"
    ) in str(err.value)


def test_init_from_is_an_absolute_path_of_a_llama():
    with pytest.raises(ValueError) as err:
        Training(init_from="s3://bucket/llama")
    assert (
        "training.init_from: 's3://bucket/llama' is not an absolute path; allowed: a folder every node mounts "
        "(/fsx/..., where FSx's data repository association brings s3:// objects)"
    ) in str(err.value)
    with pytest.raises(ValueError) as err:
        Training(init_from="/fsx/llama", model={"arch": "gpt", "n_layer": 2, "n_head": 2, "n_embd": 32})
    assert "training.init_from: '/fsx/llama' is a Llama folder, training.model.arch is 'gpt'; allowed: 'llama'" in str(
        err.value
    )
