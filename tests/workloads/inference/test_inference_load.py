"""What a replica loads: only the model's tensors of the training job's sharded checkpoint, in the
serving dtype, with no temporary copy (loading.load_model, loading.load_entry_into)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[3]
PEAK = Path(__file__).with_name("load_peak.py")
RUN = "job-run"


def save_job_checkpoint(storage: Path, config, step: int = 1) -> Path:
    """A checkpoint as the training job writes it (workloads/training/job.py training_state):
    the model's and AdamW's state dicts after one step, and the pickled progress, sharded."""
    import pickle

    import torch
    from torch.distributed.checkpoint.state_dict import get_state_dict

    from workloads.common import checkpoint as ckpt
    from workloads.common.model import build

    torch.manual_seed(0)
    model = build(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, config.vocab_size, (1, 8))
    model(x, x)[1].backward()
    optimizer.step()
    model_sd, optim_sd = get_state_dict(model, optimizer)
    path = storage / RUN / ckpt.dir_name(step)
    state = {"model": model_sd, "optim": optim_sd, "progress": pickle.dumps({"step": step})}
    ckpt.save_sharded(str(path), state, {"step": step, "model_config": config.to_dict()}).result()
    return path


def _entry_bytes(path: Path, entry: str) -> int:
    from torch.distributed.checkpoint import FileSystemReader

    md = FileSystemReader(str(path)).read_metadata().state_dict_metadata
    return sum(
        m.size.numel() * m.properties.dtype.itemsize
        for k, m in md.items()
        if k.startswith(f"{entry}.") and hasattr(m, "properties")
    )


def test_load_reads_only_the_model_into_memory(tmp_path):
    """Peak RSS growth of a replica's load <= 1.2x the weights' bytes, on a checkpoint whose
    optimizer state is twice the weights (gathering the whole checkpoint grew it ~3x)."""
    from workloads.common.model import LlamaConfig

    # 16 layers: each tensor a small share of the model, as in the production shape (the peak
    # also holds the few tensors being read).
    config = LlamaConfig(n_layer=16, n_head=4, n_kv_head=2, n_embd=256, ffn_hidden=768)
    big = save_job_checkpoint(tmp_path / "big", config)
    save_job_checkpoint(tmp_path / "warmup", LlamaConfig())
    weights, optimizer = _entry_bytes(big, "model"), _entry_bytes(big, "optim")
    assert optimizer >= 2 * weights
    out = subprocess.run(
        [sys.executable, str(PEAK), str(tmp_path / "big"), RUN, str(tmp_path / "warmup")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["weights"] == weights
    assert got["growth"] <= 1.2 * weights, f"peak RSS grew {got['growth'] / weights:.2f}x the weights' bytes"


@pytest.mark.parametrize("arch", ["llama", "gpt"])
def test_loaded_weights_equal_the_trained_ones_in_the_serving_dtype(tmp_path, arch):
    import torch

    from workloads.common.model import GPTConfig, LlamaConfig
    from workloads.inference import loading

    config = LlamaConfig() if arch == "llama" else GPTConfig(n_layer=2, n_head=2, n_embd=32)
    path = save_job_checkpoint(tmp_path, config, step=3)
    from workloads.common import checkpoint as ckpt

    trained = ckpt.load(str(path), keys=["model"]).state["model"]
    for dtype in (torch.float32, torch.bfloat16):
        loaded = loading.load_model(str(tmp_path), RUN, dtype)
        assert loaded.step == 3 and not loaded.model.training
        state = loaded.model.state_dict()
        assert state.keys() == trained.keys()
        for name, value in state.items():
            assert value.dtype == dtype and torch.equal(value, trained[name].to(dtype)), name
    if arch == "gpt":  # tied input and output embeddings stay one tensor
        assert loaded.model.head.weight is loaded.model.tok_emb.weight
    else:  # rotary tables stay fp32, recomputed
        assert loaded.model.rope_cos.dtype == torch.float32


def test_non_finite_weights_are_skipped_like_a_torn_checkpoint(tmp_path, caplog):
    import torch

    from workloads.common import checkpoint as ckpt
    from workloads.common.model import LlamaConfig
    from workloads.inference import loading

    config = LlamaConfig()
    save_job_checkpoint(tmp_path, config, step=1)
    torch.manual_seed(0)
    model = loading.build(config)
    with torch.no_grad():
        model.head.weight[0, 0] = float("nan")
    ckpt.save(
        str(tmp_path / RUN / ckpt.dir_name(2)),
        {"model": model.state_dict()},
        {"step": 2, "model_config": config.to_dict()},
    )
    loaded = loading.load_model(str(tmp_path), RUN)
    assert loaded.step == 1
    assert loaded.skipped == [
        f"checkpoint {tmp_path / RUN / ckpt.dir_name(2)} holds non-finite weights in ['head.weight']"
    ]


def test_entry_that_does_not_match_the_model_is_an_error(tmp_path):
    import torch

    from workloads.common import checkpoint as ckpt
    from workloads.common.model import LlamaConfig
    from workloads.inference import loading

    path = save_job_checkpoint(tmp_path, LlamaConfig(n_layer=2))
    model = loading._empty_model(LlamaConfig(n_layer=3), torch.float32)
    with pytest.raises(ckpt.CheckpointError) as info:
        loading.load_entry_into(str(path), "model", dict(model.state_dict()))
    assert str(info.value).startswith(f"{path}: entry 'model' does not match the model: missing ['layers.2.")
