"""``training.export_at_end``: after the last step, rank 0 exports the final checkpoint to the
run's export folder (a verified Hugging Face folder, replacing an earlier one) and every rank
learns the outcome (one process, a gloo group of one: the collectives are the job's)."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist

from config.job_settings import JobSettings
from rigs.local_cluster import free_port
from workloads.common import checkpoint as ckpt
from workloads.common import hf_llama
from workloads.common.model import Llama, LlamaConfig
from workloads.training.checkpointer import export_final

CONFIG = LlamaConfig(block_size=32, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, ffn_hidden=64)


@pytest.fixture
def group(monkeypatch):
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    yield dist.new_group(backend="gloo")
    dist.destroy_process_group()


def _settings(storage, **extra) -> JobSettings:
    return JobSettings(
        run_name="r",
        steps=20,
        checkpoint_every_steps=10,
        storage_path=str(storage),
        num_workers=1,
        cpus_per_worker=1,
        model={"arch": "llama", **CONFIG.to_dict()},
        placement_strategy="PACK",
        **extra,
    )


def test_the_final_checkpoint_is_exported_and_verified(tmp_path, group):
    torch.manual_seed(5)
    model = Llama(CONFIG)
    run_dir = tmp_path / "r"
    meta = {"step": 20, "model_config": CONFIG.to_dict()}
    ckpt.save_sharded(str(run_dir / ckpt.dir_name(20)), {"model": model.state_dict()}, meta).result()
    assert export_final(_settings(tmp_path), str(run_dir), rank=0, group=group) is None  # not asked for
    out = export_final(_settings(tmp_path, export_at_end=True), str(run_dir), rank=0, group=group)
    assert out == str(tmp_path / "r" / "export")
    assert hf_llama.verify_export(out)
    back = Llama(CONFIG)
    hf_llama.load_hf_into(back, out)
    for k, v in model.state_dict().items():
        assert torch.equal(back.state_dict()[k], v.to(torch.bfloat16).float()), k
    # Again (a restarted attempt): the new export replaces the earlier one.
    assert export_final(_settings(tmp_path, export_at_end=True), str(run_dir), rank=0, group=group) == out
    assert os.path.isdir(f"{out}.previous")


def test_a_missing_final_checkpoint_fails_the_attempt_naming_it(tmp_path, group):
    with pytest.raises(RuntimeError) as err:
        export_final(_settings(tmp_path, export_at_end=True), str(tmp_path / "r"), rank=0, group=group)
    assert str(err.value) == (
        f"training.export_at_end: --checkpoint {tmp_path / 'r' / ckpt.dir_name(20)}: no such directory"
    )
