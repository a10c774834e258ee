"""The generation service serves a Hugging Face export (``Generate(export_path=...)``,
``loading.load_export``): the export is verified against its manifest, its tokenizer must be the
job's byte tokens, and the served model generates what the exported checkpoint's model does."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import torch

from workloads.common import checkpoint as ckpt
from workloads.common import hf_llama
from workloads.common.model import Llama, LlamaConfig, encode
from workloads.export.__main__ import main as export_main
from workloads.inference import engine, loading

CONFIG = LlamaConfig(block_size=64, n_layer=2, n_head=4, n_kv_head=2, n_embd=64, ffn_hidden=128)


@pytest.fixture
def export(tmp_path) -> tuple[Path, Llama]:
    torch.manual_seed(3)
    model = Llama(CONFIG).eval()
    meta = {"step": 40, "model_config": CONFIG.to_dict()}
    ckpt.save_sharded(str(tmp_path / "runs" / "r" / ckpt.dir_name(40)), {"model": model.state_dict()}, meta).result()
    out = tmp_path / "export"
    args = ["--storage", str(tmp_path / "runs"), "--run-name", "r", "--out", str(out), "--tokenizer", "bytes"]
    assert export_main([*args, "--dtype", "float32"]) == 0
    return out, model


def test_the_service_serves_the_export_as_the_checkpoints_model(export):
    from workloads.inference.app import Generate

    out, model = export
    gen = Generate("/nonexistent-storage", "r", export_path=str(out))
    assert gen.loaded.model_id == "r@step-40" and gen.loaded.path == str(out)
    prompt = encode("the export serves")
    want = engine.generate_batch(model, [engine.GenRequest(prompt, 12, 0.0)])[0]
    (_, got) = asyncio.run(Generate._generate.__wrapped__(gen, [[engine.GenRequest(prompt, 12, 0.0)]]))[0]
    assert got == [want]


def test_an_export_whose_files_changed_is_refused(export):
    out, _ = export
    shard = next(out.glob("*.safetensors"))
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(ckpt.CheckpointError) as err:
        loading.load_export(str(out))
    assert str(err.value).startswith(f"export {out} is not a verified export: ")
    assert shard.name in str(err.value)


def test_an_export_of_another_tokenizer_is_the_llm_services(export):
    out, _ = export
    data = json.loads((out / "tokenizer.json").read_text())
    data["model"]["merges"] = [["a", "b"]]
    data["model"]["vocab"]["ab"] = 256
    assert not hf_llama.is_byte_tokenizer(data)
    (out / "tokenizer.json").write_text(json.dumps(data))
    assert loading.byte_tokens_problem(str(out)) == (
        f"export {out}: its tokenizer (257 tokens) is not the byte tokens the generation service encodes "
        "text as; allowed: an export of a byte-token run (python -m workloads.export --tokenizer bytes), "
        "or serve it with the LLM service (inference.llm)"
    )
