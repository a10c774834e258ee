"""The cost per million tokens (review/token_cost.py): training and serving figures recomputed by
hand from the config, config/catalog.py and config/prices.yaml, the rows that are not priced and
why, and the report section that prints them with their assumptions."""

from __future__ import annotations

import pytest

from config import catalog, load_environment
from config.loader import parse_environment
from config.prices import load_prices
from review.document import Document
from review.report import _token_costs
from review.token_cost import (
    SERVING_MBU,
    TRAINING_GOODPUT,
    TRAINING_MFU,
    serving_token_costs,
    training_token_cost,
)
from sizing.training import flops_per_token
from tests.config.config_data import env_data

LLAMA_7B = 6_981_685_248
# prod's llama-7b with Llama 3's vocabulary (128256 ids): 2 x 128000 x 4096 more.
PROD_PARAMS = LLAMA_7B + 2 * (128256 - 256) * 4096

# --- training ----------------------------------------------------------------------------------


def test_training_token_cost_of_prod_is_the_hand_computed_figure():
    """prod: ml.p5.48xlarge at $55.04/h over 8 H100s = $6.88 per GPU-hour; llama-7b with Llama
    3's vocabulary trains 48,250,748,928 FLOPs per token (45,098,729,472 of the blocks and
    attention, 6 x 4096 x 128256 of the output layer); 36.5 % of 989.5 TFLOP/s is 7,485.22
    tokens/s per GPU; at 90 % goodput a million tokens take 148.44 GPU-seconds: $0.28369."""
    config = load_environment("prod")
    assert flops_per_token(config.training.model) == 48_250_748_928.0 == 45_098_729_472 + 6 * 4096 * 128256
    c = training_token_cost(config, load_prices())
    assert (c.workload, c.instance_type, c.chip, c.gpus, c.gpu_hour) == ("training", "ml.p5.48xlarge", "H100", 32, 6.88)
    assert (TRAINING_MFU, TRAINING_GOODPUT, c.goodput) == (0.365, 0.90, 0.90)
    assert c.tokens_per_s_per_gpu == pytest.approx(7485.220603289203, rel=1e-12)
    assert c.per_million == pytest.approx(0.28368660092534265, rel=1e-12)
    assert c.basis == (
        "36.5% MFU (assumed) of the H100's 989.5 TFLOP/s dense bf16 peak, 48.3 GFLOP per token (preset llama-7b)"
    )
    # Half the goodput, twice the cost.
    assert training_token_cost(config, load_prices(), goodput=0.45).per_million == pytest.approx(2 * c.per_million)


def test_training_token_cost_of_staging():
    """staging: ml.g6e.12xlarge $13.12/h over 4 L40S = $3.28; the default model, 510,898,176 FLOPs
    per token (the output layer's 6 x 768 x 256 included); 36.5 % of 362.05 TFLOP/s."""
    c = training_token_cost(load_environment("staging"), load_prices())
    assert (c.chip, c.gpus, c.gpu_hour) == ("L40S", 2, 3.28)
    assert c.tokens_per_s_per_gpu == pytest.approx(258658.68426979857, rel=1e-12)
    assert c.per_million == pytest.approx(0.003913828301841976, rel=1e-12)


def test_training_token_cost_of_dev_is_computed_from_the_a10g_peak():
    """dev: ml.g5.12xlarge $7.09/h over 4 A10G = $1.7725 per GPU-hour; the A10G's 70 TFLOP/s dense
    bf16 peak (config/catalog.py, its datasheet) at 36.5 % MFU over the default model's 510,898,176
    FLOPs per token is 50,009.97 tokens/s per GPU; at 90 % goodput: $0.010939 per million."""
    config = load_environment("dev")
    prices = load_prices()
    c = training_token_cost(config, prices)
    peak = catalog.GPU_DENSE_BF16_TFLOPS["A10G"]
    assert peak == 70.0
    flops = flops_per_token(config.training.model)
    assert flops == 510_898_176.0
    gpu_hour = prices.price("hyperpod_instance_hourly", "ml.g5.12xlarge") / 4
    tps = TRAINING_MFU * peak * 1e12 / flops
    assert (c.chip, c.gpus, c.gpu_hour) == ("A10G", 2, gpu_hour) and gpu_hour == 1.7725
    assert c.tokens_per_s_per_gpu == pytest.approx(tps, rel=1e-12) == pytest.approx(50009.96519509985, rel=1e-12)
    assert c.per_million == pytest.approx(gpu_hour / 3600 / (tps * TRAINING_GOODPUT) * 1e6, rel=1e-12)
    assert c.per_million == pytest.approx(0.010939177803870406, rel=1e-12)
    assert c.basis == (
        "36.5% MFU (assumed) of the A10G's 70 TFLOP/s dense bf16 peak, 0.511 GFLOP per token (llama, 12 layers x 768)"
    )


def test_a_chip_without_a_peak_is_not_priced_and_says_why(monkeypatch):
    monkeypatch.delitem(catalog.GPU_DENSE_BF16_TFLOPS, "A10G")
    d = training_token_cost(load_environment("dev"), load_prices())
    assert (d.chip, d.gpu_hour, d.per_million, d.tokens_per_s_per_gpu) == ("A10G", 1.7725, None, None)
    assert d.basis == "no dense bf16 peak for A10G in config/catalog.py: not priced"


@pytest.mark.parametrize("shape", [{"preset": "tiny"}, {"preset": "llama-7b"}, {"arch": "gpt"}, {}])
def test_the_plans_flops_per_token_is_the_models(shape):
    """The review's FLOPs per token (sizing, no torch) and the model's (workloads, MFU) agree."""
    from config.training import ModelSize
    from sizing.training import flops_per_token as planned
    from workloads.common.model import config_from_dict, flops_per_token

    m = ModelSize.model_validate(shape)
    assert planned(m) == flops_per_token(config_from_dict(m.architecture()))


# --- serving -----------------------------------------------------------------------------------


def test_every_chip_with_a_compute_peak_has_a_memory_bandwidth():
    """Serving is priced where training is: each chip with a dense bf16 peak has its bandwidth,
    and each bandwidth names a chip the catalog knows."""
    assert set(catalog.GPU_DENSE_BF16_TFLOPS) <= set(catalog.GPU_MEMORY_BANDWIDTH_GBPS)
    assert set(catalog.GPU_MEMORY_BANDWIDTH_GBPS) <= set(catalog.GPU_MEMORY_GIB)
    assert catalog.memory_bandwidth_gbps("ml.g6e.12xlarge") == 864.0
    assert catalog.memory_bandwidth_gbps("ml.p5en.48xlarge") == 4800.0
    assert catalog.memory_bandwidth_gbps("ml.g7e.12xlarge") is None  # RTX PRO 6000: no figure


def test_serving_token_cost_of_prod_is_the_hand_computed_roofline():
    """prod serves the training run's llama-7b with Llama 3's vocabulary (8,030,261,248
    parameters, 16.06 GB in bf16) on ml.g6e.12xlarge ($13.12/h over 4 L40S = $3.28 per
    GPU-hour). 55 % of 864 GB/s over 16.06 GB is 29.59 decode steps/s, x 32 sequences
    (inference.max_batch_size) = 946.8 tokens/s per GPU, below the compute cap (36.5 % of
    362.05 TFLOP/s over a third of 48.3 GFLOP per token: 8,216 tokens/s): $0.9623 per million
    generated tokens."""
    config = load_environment("prod")
    prices = load_prices()
    generate, llm = serving_token_costs(config, prices)
    inf = config.inference
    assert config.training.model.parameters() == PROD_PARAMS and inf.gpu_dtype == "bfloat16"
    assert (inf.max_batch_size, inf.gpus_per_replica, SERVING_MBU) == (32, 1.0, 0.55)
    bandwidth = catalog.GPU_MEMORY_BANDWIDTH_GBPS["L40S"]
    gpu_hour = prices.price("hyperpod_instance_hourly", "ml.g6e.12xlarge") / 4
    tps = SERVING_MBU * bandwidth * 1e9 / (2 * PROD_PARAMS) * inf.max_batch_size
    cap = TRAINING_MFU * catalog.GPU_DENSE_BF16_TFLOPS["L40S"] * 1e12 / (flops_per_token(config.training.model) / 3)
    assert tps < cap
    assert (generate.workload, generate.instance_type, generate.chip) == (
        "serving: generate",
        "ml.g6e.12xlarge",
        "L40S",
    )
    assert (generate.gpus, generate.gpu_hour, generate.goodput) == (2, 3.28, None)  # max_replicas 2 x 1 GPU
    assert generate.tokens_per_s_per_gpu == pytest.approx(tps, rel=1e-12) == pytest.approx(946.8185112774056)
    assert generate.per_million == pytest.approx(gpu_hour / 3600 / tps * 1e6, rel=1e-12)
    assert generate.per_million == pytest.approx(0.9622869644594086, rel=1e-12)
    assert generate.basis == (
        "decode roofline (assumed): 55% of the L40S's 864 GB/s over 16.1 GB of bfloat16 weights per step "
        "(preset llama-7b, the training run's model, 8.03B parameters), 32 sequences per step "
        "(inference.max_batch_size); compute cap 8,216 tokens/s not reached; KV-cache reads and prefill "
        "not counted (an upper bound)"
    )
    # The LLM service's weights come from FSx or S3 and the config does not say how big they are.
    assert (llm.workload, llm.gpus, llm.gpu_hour, llm.tokens_per_s_per_gpu, llm.per_million) == (
        "serving: llm",
        2,
        3.28,
        None,
        None,
    )
    assert llm.basis == (
        "inference.llm serves 'served-llm' from s3://hpray-prod-checkpoints-333333333333-us-east-1/checkpoints/"
        "models/llama-7b-fineweb, whose size the config does not state: not priced"
    )


def test_dev_serves_on_the_a10g_and_has_no_llm_row():
    config = load_environment("dev")
    (generate,) = serving_token_costs(config, load_prices())
    params = config.training.model.parameters()
    tps = SERVING_MBU * catalog.GPU_MEMORY_BANDWIDTH_GBPS["A10G"] * 1e9 / (2 * params) * 16
    assert (generate.instance_type, generate.chip, generate.gpu_hour) == ("ml.g5.12xlarge", "A10G", 1.7725)
    assert generate.tokens_per_s_per_gpu == pytest.approx(tps, rel=1e-12)
    assert generate.per_million == pytest.approx(1.7725 / 3600 / tps * 1e6, rel=1e-12)


def test_float32_weights_halve_the_tokens_and_a_second_gpu_per_replica_idles():
    base = serving_token_costs(load_environment("prod"), load_prices())[0]
    data = env_data("prod")
    data["inference"].update(gpu_dtype="float32")
    f32 = serving_token_costs(parse_environment(data, source="prod.yaml"), load_prices())[0]
    assert f32.tokens_per_s_per_gpu == pytest.approx(base.tokens_per_s_per_gpu / 2, rel=1e-12)
    assert "32.1 GB of float32 weights" in f32.basis and "compute cap" not in f32.basis
    data = env_data("prod")
    data["inference"].update(gpus_per_replica=2)
    data["inference"]["llm"].update(enabled=False)  # room for 2 x 2 GPUs, twice during an upgrade
    two = serving_token_costs(parse_environment(data, source="prod.yaml"), load_prices())[0]
    assert two.tokens_per_s_per_gpu == pytest.approx(base.tokens_per_s_per_gpu / 2, rel=1e-12)
    assert two.gpus == 4 and "one of 2 GPUs per replica decoding" in two.basis


def test_a_large_batch_of_a_small_model_is_compute_bound():
    """staging's 75.9M-parameter model in batches of 1024: 3.2M tokens/s by bandwidth, more than
    the L40S computes at 36.5 % of its peak (775,976 tokens/s), which is the figure then."""
    data = env_data("staging")
    data["inference"].update(max_batch_size=1024, max_ongoing_requests=2048)
    config = parse_environment(data, source="staging.yaml")
    generate = serving_token_costs(config, load_prices())[0]
    cap = TRAINING_MFU * 362.05e12 / (flops_per_token(config.training.model) / 3)
    assert generate.tokens_per_s_per_gpu == pytest.approx(cap, rel=1e-12) == pytest.approx(775976, rel=1e-6)
    assert "; compute-bound at 36.5% of the 362.05 TFLOP/s dense bf16 peak;" in generate.basis


def test_a_chip_without_a_memory_bandwidth_is_not_priced_and_says_why(monkeypatch):
    monkeypatch.delitem(catalog.GPU_MEMORY_BANDWIDTH_GBPS, "L40S")
    generate = serving_token_costs(load_environment("prod"), load_prices())[0]
    assert (generate.gpu_hour, generate.tokens_per_s_per_gpu, generate.per_million) == (3.28, None, None)
    assert generate.basis == "no memory bandwidth for L40S in config/catalog.py: not priced"
    doc = Document("t")
    _token_costs(doc, load_environment("prod"), load_prices())
    assert (
        "| serving: generate | ml.g6e.12xlarge (L40S) | 2 | $3.28 | n/a | no memory bandwidth for L40S in "
        "config/catalog.py: not priced | n/a | ⚠ n/a |" in doc.markdown()
    )


# --- the report --------------------------------------------------------------------------------


def test_report_prints_the_token_costs_with_their_assumptions():
    doc = Document("t")
    _token_costs(doc, load_environment("prod"), load_prices())
    text = doc.markdown()
    assert "### Cost per million tokens" in text
    assert "an assumed 36.5% model FLOPs utilization" in text and "an assumed 90% goodput" in text
    assert "an assumed 55% of the GPU's memory bandwidth" in text and "an upper bound on tokens/s" in text
    assert "| training | ml.p5.48xlarge (H100) | 32 | $6.88 | 7,485 |" in text
    assert "| 90% (assumed) | $0.2837 |" in text
    assert "| serving: generate | ml.g6e.12xlarge (L40S) | 2 | $3.28 | 947 | decode roofline (assumed)" in text
    assert "| every batch full (assumed) | $0.9623 |" in text
    assert "| serving: llm | ml.g6e.12xlarge (L40S) | 2 | $3.28 | n/a |" in text


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_every_environment_prices_training_and_serving(env):
    """Each environment's report shows a training row and a serving row, both priced, each with
    the assumption it rests on next to the figure."""
    config = load_environment(env)
    prices = load_prices()
    doc = Document("t")
    _token_costs(doc, config, prices)
    rows = [line for line in doc.markdown().splitlines() if line.startswith(("| training |", "| serving: generate |"))]
    assert len(rows) == 2, rows
    training, serving = rows
    t = training_token_cost(config, prices)
    s = serving_token_costs(config, prices)[0]
    assert t.per_million is not None and s.per_million is not None
    assert f"| {t.basis} | 90% (assumed) | ${t.per_million:.4g} |" in training
    assert f"| {s.basis} | every batch full (assumed) | ${s.per_million:.4g} |" in serving


def test_a_measured_mfu_replaces_the_assumed_one():
    """prod with training.measured_mfu 0.438 (a run's mfu metric): 1.2x the assumed 36.5 %, so the
    tokens per GPU-second are 1.2x and the cost per million 1/1.2 of the assumed figure."""
    data = env_data("prod")
    assumed = training_token_cost(parse_environment(data), load_prices())
    data["training"]["measured_mfu"] = 0.438
    c = training_token_cost(parse_environment(data), load_prices())
    assert c.tokens_per_s_per_gpu == pytest.approx(1.2 * assumed.tokens_per_s_per_gpu, rel=1e-12)
    assert c.per_million == pytest.approx(assumed.per_million / 1.2, rel=1e-12)
    assert c.basis.startswith("43.8% MFU (measured) of the H100's")
    # An explicit figure wins over both.
    assert training_token_cost(parse_environment(data), load_prices(), mfu=0.365).basis.startswith("36.5% MFU (given)")
