"""``training.init_from`` through the real job (Ray Train, FSDP2 over 2 CPU workers): a fresh run
records the Hugging Face folder and its digest in its checkpoints' meta; resumed with more steps
and an ``init_from`` that no longer exists, it continues from its own checkpoint and keeps the
record (the folder is not read)."""

from __future__ import annotations

import json

import pytest
import torch

from workloads.common import checkpoint as ck
from workloads.common import hf_llama
from workloads.common.model import Llama, LlamaConfig, config_from_dict
from workloads.training import settings as S
from workloads.training.job import run

pytestmark = [pytest.mark.slow, pytest.mark.ray_cluster]
COMMON = {
    "checkpoint_every_steps": 1,
    "report_every_steps": 1,
    "warmup_steps": 0,
    "batch_size_per_worker": 2,
    "data_max_bytes": 1 << 16,
    "max_failures": 0,
    "storage_shared": True,
}


def _meta(storage, run_name: str, step: int) -> dict:
    path = storage / run_name / ck.dir_name(step) / ck.META
    return json.loads(path.read_text())


def test_a_fresh_run_records_init_from_and_a_resume_ignores_it(ray_cluster, tmp_path):
    storage = tmp_path / "runs"
    s = S.for_local({**COMMON, "run_name": "ft", "steps": 2}, storage_path=str(storage))
    config = config_from_dict(s.model)
    assert isinstance(config, LlamaConfig)
    torch.manual_seed(11)
    folder = tmp_path / "hf"
    tok = tmp_path / "tokenizer.json"
    tok.write_text(json.dumps(hf_llama.byte_tokenizer_json()))
    hf_llama.export_hf(
        Llama(config).state_dict(), str(folder), config=config, tokenizer_files=[str(tok)], max_shard_bytes=1 << 20
    )
    digest = hf_llama.load_hf_into(Llama(config), str(folder))

    result = run(s.model_copy(update={"init_from": str(folder)}))
    assert result.error is None, result.error
    record = {"path": str(folder), "digest": digest}
    assert _meta(storage, "ft", 1)["init_from"] == record
    assert _meta(storage, "ft", 2)["init_from"] == record

    more = S.for_local({**COMMON, "run_name": "ft", "steps": 3}, storage_path=str(storage))
    result = run(more.model_copy(update={"init_from": str(tmp_path / "gone")}))
    assert result.error is None, result.error
    assert _meta(storage, "ft", 3)["init_from"] == record


def test_export_at_end_writes_the_final_checkpoint_as_a_verified_folder(ray_cluster, tmp_path):
    storage = tmp_path / "runs"
    s = S.for_local({**COMMON, "run_name": "ex", "steps": 2, "export_at_end": True}, storage_path=str(storage))
    result = run(s)
    assert result.error is None, result.error
    out = storage / "ex" / "export"
    assert hf_llama.verify_export(str(out))
    manifest = json.loads((out / hf_llama.MANIFEST).read_text())
    assert manifest["source"]["step"] == 2
    # The folder holds the final checkpoint's weights (bf16, as exported).
    final = ck.load_latest_valid(str(storage), "ex", keys=["model"])
    config = config_from_dict(s.model)
    back = Llama(config)
    hf_llama.load_hf_into(back, str(out))
    saved = final.state["model"]
    assert set(saved) == set(back.state_dict())
    for k, v in back.state_dict().items():
        assert torch.equal(v, saved[k].to(torch.bfloat16).float()), k
