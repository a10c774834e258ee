"""What a million tokens cost on an environment's GPUs: training from the sizing plan (its instance
group, workers and the FLOPs of its model at the plan's MFU), serving where a throughput figure
exists. Prices from review/prices.yaml (``review.cost.PriceTable``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from config import catalog
from review.cost import PriceTable, load_prices
from sizing.plan import plan_of
from sizing.training import ASSUMED_MFU, flops_per_token

if TYPE_CHECKING:
    from config.environment import EnvironmentConfig
    from config.training import ModelSize

# Stated assumptions of the cost per million tokens (the report prints them next to the figures).
# MFU: the sizing plan's (sizing/training.py ASSUMED_MFU, measured on one GPU).
TRAINING_MFU = ASSUMED_MFU
# Goodput: the Llama 3 paper (Dubey et al. 2024, section 3.3.4) reports more than 90 % effective training time over its
# pre-training; the rehearsal (docs/benchmarks.md, "Goodput") measures this platform's.
TRAINING_GOODPUT = 0.90


@dataclass(frozen=True)
class TokenCost:
    """What a million tokens cost on one environment's GPUs."""

    workload: str  # "training" or "serving"
    instance_type: str
    chip: str
    gpus: int  # GPUs the workload runs on
    gpu_hour: float | None  # $ per GPU-hour (the instance's price over its GPUs)
    tokens_per_s_per_gpu: float | None
    basis: str  # where tokens/s comes from
    goodput: float | None
    per_million: float | None  # $ per million tokens; None: not priced (``basis`` says why)


def training_token_cost(
    config: EnvironmentConfig,
    prices: PriceTable | None = None,
    *,
    mfu: float = TRAINING_MFU,
    goodput: float = TRAINING_GOODPUT,
) -> TokenCost | None:
    """Cost per million training tokens of the environment's training run: its instance group's
    hourly price per GPU, over the tokens one GPU trains in an hour at ``mfu`` of the chip's dense
    bf16 peak (config/catalog.py) for the configured model's FLOPs per token, times ``goodput``.
    Per GPU, so the same for any worker count (perfect scaling assumed). None: no GPU to train on."""
    prices = prices or load_prices()
    plan = plan_of(config).training
    if plan is None or not plan.placement.gpus_per_worker:
        return None
    group, p = plan.group, plan.placement
    spec = catalog.instance_spec(group.instance_type)
    hourly = prices.price("hyperpod_instance_hourly", group.instance_type)
    gpu_hour = None if hourly is None else hourly / spec.gpus
    peak = catalog.dense_bf16_tflops(group.instance_type)
    model = config.training.model
    flops = flops_per_token(model)
    tps = None if peak is None else mfu * peak * 1e12 / flops
    if peak is None:
        basis = f"no dense bf16 peak for {spec.accelerator} in config/catalog.py: not priced"
    else:
        basis = (
            f"{mfu:.1%} MFU (assumed) of the {spec.accelerator}'s {peak:g} TFLOP/s dense bf16 peak, "
            f"{flops / 1e9:.3g} GFLOP per token ({_model_name(model)})"
        )
    per_million = None if gpu_hour is None or tps is None else gpu_hour / 3600 / (tps * goodput) * 1e6
    return TokenCost(
        workload="training",
        instance_type=group.instance_type,
        chip=spec.accelerator,
        gpus=p.workers * p.gpus_per_worker,
        gpu_hour=gpu_hour,
        tokens_per_s_per_gpu=tps,
        basis=basis if gpu_hour is not None else f"no price for {group.instance_type} in review/prices.yaml",
        goodput=goodput,
        per_million=per_million,
    )


def serving_token_cost(config: EnvironmentConfig, prices: PriceTable | None = None) -> TokenCost | None:
    """Cost per million generated tokens of the Serve group. No generation throughput of the
    served models on these GPUs is measured in this repository (bench/serving_model.py measures
    tokens/s on a CPU), so the row names the GPU-hour price and says it is not priced."""
    prices = prices or load_prices()
    served = [
        g
        for g in config.hyperpod.instance_groups
        if g.labels.get("workload") == "ray-serve" and catalog.instance_spec(g.instance_type).gpus
    ] or [g for g in config.hyperpod.instance_groups if catalog.instance_spec(g.instance_type).gpus][:1]
    if not served:
        return None
    group = served[0]
    spec = catalog.instance_spec(group.instance_type)
    hourly = prices.price("hyperpod_instance_hourly", group.instance_type)
    return TokenCost(
        workload="serving",
        instance_type=group.instance_type,
        chip=spec.accelerator,
        gpus=group.instance_count * spec.gpus,
        gpu_hour=None if hourly is None else hourly / spec.gpus,
        tokens_per_s_per_gpu=None,
        basis=f"no measured generation throughput on {spec.accelerator}: not priced",
        goodput=None,
        per_million=None,
    )


def _model_name(m: ModelSize) -> str:
    return f"preset {m.preset}" if m.preset else f"{m.arch}, {m.n_layer} layers x {m.n_embd}"
