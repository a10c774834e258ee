"""The memory estimator (sizing/training.py ``memory_per_gpu``) checked against the job's model:
exact parameter, gradient and AdamW bytes for every preset from the meta-device model (whole, and
each rank's FSDP2 shard), and the activation estimate against a measured CPU peak for small
shapes, within the margin docs/benchmarks.md states."""

from __future__ import annotations

import pytest
import torch

from bench import memory_estimator as bench
from config.training import PRESETS, Training
from sizing.training import flops_per_token, memory_per_gpu


@pytest.mark.parametrize("preset", list(PRESETS))
def test_whole_model_bytes_equal_the_meta_models(preset):
    """A real forward, backward and AdamW step of the job's model on the meta device: its
    parameters, gradients and AdamW moments (fp32) are the estimate's bytes, exactly."""
    got = bench.exact_bytes(preset)
    est = memory_per_gpu(Training(model={"preset": preset}, sharding="ddp"), 1)
    assert got["count"] == PRESETS[preset]["params"]
    assert got["parameters"] == est["parameters"] == 4 * got["count"]
    assert got["gradients"] == est["gradients"] == 4 * got["count"]
    assert got["optimizer"] == est["optimizer"] == 8 * got["count"]
    # AdamW's step counters (one fp32 scalar per parameter tensor) are left out of the estimate.
    assert got["step_counters"] < 2048


@pytest.fixture
def fake_world():
    """A process group of 32 ranks that moves no data (torch's fake backend): FSDP2 shards as
    rank 0 of prod's 32 workers would."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=32)
    yield 32
    dist.destroy_process_group()


@pytest.mark.parametrize("preset", ["tiny", "llama-7b", "llama-11b"])
def test_each_ranks_fsdp_shard_bytes_equal_the_estimate(preset, fake_world):
    """The job's own sharding (``shard_model``) of the meta-device model over 32 ranks: rank 0's
    parameter shards, and the AdamW moments of a step over them, are the estimate's 1/32. FSDP2
    reduce-scatters each gradient into its parameter's shard, so gradients take the same bytes as
    the shards."""
    from workloads.common.model import build, config_from_dict
    from workloads.training.job import make_optimizer
    from workloads.training.parallelize import shard_model

    t = Training(model={"preset": preset}, sharding="fsdp")
    with torch.device("meta"):
        model = build(config_from_dict(t.model.architecture()))
    model = shard_model(
        model, sharding="fsdp", device=torch.device("cpu"), precision="fp32", activation_checkpointing=True
    )
    params = list(model.parameters())
    local = sum(p.to_local().numel() * p.element_size() for p in params)
    for p in params:
        p.grad = torch.zeros_like(p)
    opt = make_optimizer(model, learning_rate=1e-3, weight_decay=0.1, fused=False)
    opt.step()
    moments = sum(
        v.to_local().numel() * v.element_size() for st in opt.state.values() for k, v in st.items() if k != "step"
    )
    est = memory_per_gpu(t, fake_world)
    assert local == est["parameters"] == 4 * PRESETS[preset]["params"] / 32
    assert moments == est["optimizer"] == 8 * PRESETS[preset]["params"] / 32


@pytest.mark.parametrize("preset", list(PRESETS))
def test_the_step_time_flops_are_the_models(preset):
    """sizing's FLOPs per token (the step-time estimate of the FSX sizing) is the built model's."""
    from workloads.common.model import config_from_dict
    from workloads.common.model import flops_per_token as model_flops

    t = Training(model={"preset": preset})
    assert flops_per_token(t.model) == model_flops(config_from_dict(t.model.architecture()))


# The estimate's activations against the measured CPU peak: 0.73 to 0.85 of it in the run
# docs/benchmarks.md reports. Allocations are deterministic, so the band is narrow.
MARGIN = (0.70, 0.90)


@pytest.mark.parametrize("label", list(bench.SHAPES))
@pytest.mark.parametrize("activation_checkpointing", [False, True])
def test_activation_estimate_against_the_measured_cpu_peak(label, activation_checkpointing):
    peak, est = bench.activation_peak(
        bench.SHAPES[label], batch=bench.BATCH, activation_checkpointing=activation_checkpointing
    )
    assert MARGIN[0] <= est / peak <= MARGIN[1], (label, activation_checkpointing, peak, est)


def test_the_loss_chunk_is_the_models():
    """The estimator's loss chunk is the chunk the model's loss takes."""
    from sizing.training import LOSS_CHUNK_MIB
    from workloads.common.loss import DEFAULT_CHUNK_MIB

    assert LOSS_CHUNK_MIB == DEFAULT_CHUNK_MIB


def test_memory_counts_the_vocabulary_and_no_fp32_logits():
    """A 128k vocabulary adds its embedding and output rows to the parameters, and the loss keeps
    one chunk of logits, not every token's: far below tokens x vocab x 4 bytes."""
    small = Training(model={"preset": "llama-1b"})
    big = Training(model={"preset": "llama-1b", "vocab_size": 128256})
    assert big.model.parameters() - small.model.parameters() == 2 * (128256 - 256) * 2048
    tokens = big.batch_size_per_worker * big.model.block_size
    est = memory_per_gpu(big, 8)
    assert est["loss"] < tokens * 128256 * 4 / 10
    assert est["loss"] > 256 * (1 << 20)  # at least one chunk's fp32 logits
