"""FSx sized for the checkpoint burst (sizing/storage.py): a checkpoint's bytes, the estimated
step time, FSx's throughput, and the config error of a file system too slow for the cadence."""

from __future__ import annotations

import pytest

from config import load_environment
from config.loader import parse_environment
from manifests import registry
from sizing import storage
from sizing.training import flops_per_token, step_seconds
from tests.config.config_data import config_errors, env_data

LLAMA_7B = 6_981_685_248
# prod's llama-7b with Llama 3's 128256-id vocabulary: 2 x (128256 - 256) x 4096 more (embedding
# and output rows).
PROD_PARAMS = LLAMA_7B + 2 * (128256 - 256) * 4096


def test_prod_checkpoint_is_12_bytes_per_parameter_over_the_fsdp_shards():
    c = registry.plan_of(load_environment("prod")).checkpoint
    assert c is not None
    assert c.parameters == PROD_PARAMS == 8_030_261_248
    # fp32 parameters (4) and AdamW's two fp32 moments (8), whatever the bf16 compute precision.
    assert c.bytes == 12 * PROD_PARAMS == 96_363_134_976
    assert (c.gpus, c.nodes, c.efa_interfaces, c.accelerator) == (32, 4, 4 * 32, "H100")


def test_ddp_writes_the_replicated_state_once():
    prod = load_environment("prod")
    ddp = prod.training.model_copy(update={"sharding": "ddp"})
    assert storage.checkpoint_bytes(ddp, 32) == storage.checkpoint_bytes(prod.training, 32) == 12 * PROD_PARAMS


def test_step_time_is_the_model_flops_over_the_gpus_peak_at_the_stated_mfu():
    prod = load_environment("prod")
    # llama-7b: per block 2*4096^2 + 2*4096*1024 (grouped k/v) + 3*4096*14336 (SwiGLU) + 2*4096 (norms).
    per_block = 2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
    assert per_block == 218_112_000
    # The output layer: 4096 x 128256 more weights, 6 FLOPs each per token.
    per_token = 6 * (32 * per_block + 4096 * 128256) + 12 * 32 * 2048 * 4096
    assert flops_per_token(prod.training.model) == per_token == 48_250_748_928
    tokens = 32 * 8 * 2048  # workers x batch_size_per_worker x block_size
    p = registry.plan_of(prod).training.placement
    assert step_seconds(prod.training, p) == pytest.approx(tokens * per_token / (32 * 989.5e12 * 0.365))
    assert step_seconds(prod.training, p) == pytest.approx(2.1888, abs=1e-4)


def test_fsx_throughput_is_capacity_times_the_per_tib_tier():
    assert storage.fsx_bytes_per_second(4800, 500) == 4800 / 1024 * 500 * 1e6 == 2_343_750_000
    c = registry.plan_of(load_environment("prod")).checkpoint
    assert c is not None
    assert c.write_seconds == pytest.approx(96_363_134_976 / 2_343_750_000)  # 41.1 s
    assert c.export_seconds == c.write_seconds
    assert c.allowed_seconds == pytest.approx(0.25 * 1000 * c.step_seconds)
    assert c.headroom == pytest.approx(c.allowed_seconds / c.write_seconds)
    assert c.headroom > 13


def test_capacities_are_the_persistent_2_steps():
    it = storage.capacities()
    assert [next(it) for _ in range(4)] == [1200, 2400, 4800, 7200]
    it = storage.capacities(3000)
    assert [next(it) for _ in range(2)] == [4800, 7200]


def test_prod_fsx_too_slow_for_the_checkpoint_burst_fails_with_both_numbers_and_the_fix():
    errors = config_errors("prod", lambda d: d["fsx"].update(storage_capacity_gib=1200, throughput_mb_s_per_tib=125))
    # 96.36 GB at 1200/1024 TiB x 125 MB/s = 146.5 MB/s: 658 s, against 0.25 x 1000 x 2.189 s = 547 s;
    # 176.1 MB/s needed: 250 MB/s/TiB at 1200 GiB (293 MB/s), or 2400 GiB at 125 (293 MB/s), or
    # 1000 x 657.8 / 547.2 = 1202.2 steps.
    assert errors == [
        "fsx.throughput_mb_s_per_tib: a checkpoint of llama-7b (8.03B parameters: 96.4 GB of fp32 parameters and "
        "AdamW moments) takes 658 s to write at 146 MB/s (1200 GiB x 125 MB/s/TiB), more than the 547 s it may "
        "take (fsx.checkpoint_write_share 0.25 of training.checkpoint_every_steps 1000 x an estimated 2.19 s per "
        "step at 36.5% MFU of 32 H100 GPUs); it needs 176 MB/s; allowed: fsx.throughput_mb_s_per_tib 250 at 1200 "
        "GiB, or fsx.storage_capacity_gib 2400 at 125 MB/s/TiB, or a longer training.checkpoint_every_steps "
        "(at least 1203)"
    ]


def test_when_no_tier_at_this_capacity_would_do_only_the_capacity_is_offered():
    errors = config_errors(
        "prod",
        lambda d: d["fsx"].update(storage_capacity_gib=1200, throughput_mb_s_per_tib=125, checkpoint_write_share=0.02),
    )
    # 0.02 x 2188.8 s = 43.78 s: 2201.2 MB/s needed; 1000 MB/s/TiB at 1200 GiB gives 1172; 125 needs
    # 17.61 TiB (18,033 GiB: 19,200); 1000 x 657.8 / 43.78 = 15027.x steps.
    assert len(errors) == 1
    assert errors[0].endswith(
        "it needs 2201 MB/s; allowed: fsx.storage_capacity_gib 19200 at 125 MB/s/TiB, or a longer "
        "training.checkpoint_every_steps (at least 15028)"
    )


def test_the_write_share_is_bounded_by_the_export():
    errors = config_errors("dev", lambda d: d["fsx"].update(checkpoint_write_share=0.6))
    assert errors == ["fsx.checkpoint_write_share: Input should be less than or equal to 0.5 (given: 0.6)"]


def test_cpu_workers_have_no_step_time_and_nothing_is_checked():
    data = env_data("dev")
    data["training"].update(gpus_per_worker=0)
    c = registry.plan_of(parse_environment(data, source="dev.yaml")).checkpoint
    assert c is not None and c.step_seconds is None and c.headroom is None and c.goodput is None
    assert storage.burst_problems(c) == []
    assert storage.table_row("dev", c)[5] == "n/a (CPU workers)"


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_every_committed_environment_absorbs_its_burst(env):
    c = registry.plan_of(load_environment(env)).checkpoint
    assert c is not None and c.headroom is not None and c.headroom >= 1


def test_dev_step_time_is_the_a10g_peak_from_the_catalog():
    """dev trains on 2 A10G (ml.g5.12xlarge): its step is the global batch's FLOPs over the two
    GPUs' dense bf16 peak (config/catalog.py, the A10G datasheet's 70 TFLOP/s) at the plan's MFU."""
    from config import catalog
    from sizing.training import ASSUMED_MFU, flops_per_token

    config = load_environment("dev")
    t = config.training
    c = registry.plan_of(config).checkpoint
    assert c is not None and c.accelerator == "A10G" and c.gpus == 2
    peak = catalog.GPU_DENSE_BF16_TFLOPS["A10G"]
    assert peak == 70.0
    tokens = 2 * t.batch_size_per_worker * t.model.block_size
    expected = tokens * flops_per_token(t.model) / (2 * peak * 1e12 * ASSUMED_MFU)
    assert c.step_seconds == pytest.approx(expected, rel=1e-12)
    assert c.headroom is not None and c.headroom >= 1 and storage.burst_problems(c) == []
    assert storage.table_row("dev", c)[5] == f"{expected:.3g} s (36.5% MFU)"


def test_a_chip_without_a_peak_gets_no_step_time_and_says_so(monkeypatch):
    """A chip with no dense bf16 figure in config/catalog.py: no step time, nothing checked."""
    from config import catalog

    monkeypatch.delitem(catalog.GPU_DENSE_BF16_TFLOPS, "A10G")
    c = registry.plan_of(load_environment("dev")).checkpoint
    assert c is not None and c.accelerator == "A10G" and c.step_seconds is None and c.headroom is None
    assert storage.burst_problems(c) == []
    assert storage.table_row("dev", c)[5] == "n/a (no peak for the chip)"


def test_fsx_must_hold_the_dataset_and_the_checkpoints_kept():
    """The declared dataset (the pretokenize section's, when training reads its output) plus
    num_to_keep checkpoints against FSx's capacity: too small is one line naming both."""
    from config.pretokenize import Pretokenize

    prod = load_environment("prod")
    data = Pretokenize(
        input="s3://corpus/raw/", output="/fsx/datasets/web", tokenizer="/fsx/tok/tokenizer.json", dataset_size_gib=4600
    )
    training = prod.training.model_copy(
        update={"dataset_path": "/fsx/datasets/web/", "tokenizer": "/fsx/tok/tokenizer.json"}
    )
    env = prod.model_copy(update={"pretokenize": data, "training": training})
    c = registry.plan_of(prod).checkpoint
    gib = c.bytes / (1 << 30)
    assert storage.capacity_problems(env, c) == [
        f"fsx.storage_capacity_gib: 4800 GiB cannot hold {4600 + 3 * gib:.0f} GiB: pretokenize.dataset_size_gib "
        f"4600 GiB + training.num_to_keep 3 checkpoints x {gib:.1f} GiB; allowed: fsx.storage_capacity_gib 7200 "
        "or more, or fewer checkpoints kept"
    ]
    small = env.model_copy(update={"pretokenize": data.model_copy(update={"dataset_size_gib": 240})})
    assert storage.capacity_problems(small, c) == []
    assert storage.dataset_gib(small) == (240, "pretokenize.dataset_size_gib")
    other = env.model_copy(update={"training": training.model_copy(update={"tokenizer": "bytes"})})
    assert storage.data_problems(other) == [
        "training.tokenizer: 'bytes', but training.dataset_path '/fsx/datasets/web/' is pretokenize.output, "
        "tokenized with '/fsx/tok/tokenizer.json'; allowed: '/fsx/tok/tokenizer.json'"
    ]
