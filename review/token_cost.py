"""What a million tokens cost on an environment's GPUs: training from the sizing plan (its instance
group, workers and the FLOPs of its model at the plan's MFU), serving from a decode roofline (the
GPU's memory bandwidth over the served weights, times the sequences a replica decodes at once).
Prices from config/prices.yaml (``config.prices.PriceTable``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from config import catalog
from config.prices import PriceTable, load_prices
from manifests import registry
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
# Serving: the share of the GPU's memory bandwidth a decode step turns into weight reads (model
# bandwidth utilization). Databricks measured 60 % on 2 H100 and 55 % on 4 A100-40GB at batch 1,
# falling as the batch grows ("LLM Inference Performance Engineering: Best Practices",
# https://www.databricks.com/blog/llm-inference-performance-engineering-best-practices); the lower.
SERVING_MBU = 0.55
# Bytes of one served weight by inference.gpu_dtype.
_DTYPE_BYTES = {"bfloat16": 2, "float32": 4}


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
    mfu: float | None = None,
    goodput: float = TRAINING_GOODPUT,
) -> TokenCost | None:
    """Cost per million training tokens of the environment's training run: its instance group's
    hourly price per GPU, over the tokens one GPU trains in an hour at ``mfu`` of the chip's dense
    bf16 peak (config/catalog.py) for the configured model's FLOPs per token, times ``goodput``.
    Per GPU, so the same for any worker count (perfect scaling assumed). None: no GPU to train on.
    ``mfu``: given, else ``training.measured_mfu`` (a run's measured ``mfu`` metric), else the
    assumed ``TRAINING_MFU``; the basis says which."""
    prices = prices or load_prices()
    plan = registry.plan_of(config).training
    if plan is None or not plan.placement.gpus_per_worker:
        return None
    group, p = plan.group, plan.placement
    spec = catalog.instance_spec(group.instance_type)
    hourly = prices.price("hyperpod_instance_hourly", group.instance_type)
    gpu_hour = None if hourly is None else hourly / spec.gpus
    peak = catalog.dense_bf16_tflops(group.instance_type)
    model = config.training.model
    source = "given" if mfu is not None else "measured" if config.training.measured_mfu is not None else "assumed"
    if mfu is None:
        mfu = config.training.measured_mfu if config.training.measured_mfu is not None else TRAINING_MFU
    flops = flops_per_token(model)
    tps = None if peak is None else mfu * peak * 1e12 / flops
    if peak is None:
        basis = f"no dense bf16 peak for {spec.accelerator} in config/catalog.py: not priced"
    else:
        basis = (
            f"{mfu:.1%} MFU ({source}) of the {spec.accelerator}'s {peak:g} TFLOP/s dense bf16 peak, "
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
        basis=basis if gpu_hour is not None else f"no price for {group.instance_type} in config/prices.yaml",
        goodput=goodput,
        per_million=per_million,
    )


def serving_token_costs(
    config: EnvironmentConfig, prices: PriceTable | None = None, *, mbu: float = SERVING_MBU
) -> list[TokenCost]:
    """Cost per million generated tokens of each serving service: the generation service (the
    training run's model, ``inference:``) and, where enabled, the Ray Serve LLM service
    (``inference.llm``). No generation throughput is measured on a GPU any environment serves on
    (docs/benchmarks.md: one greedy request on one H200), so tokens/s is a stated decode roofline,
    ``generation_tokens_per_s``. Empty: no GPU group to serve on."""
    prices = prices or load_prices()
    inf = config.inference
    try:
        group = inf.resolved_instance_group(config.hyperpod)
    except KeyError:
        return []
    spec = catalog.instance_spec(group.instance_type)
    hourly = prices.price("hyperpod_instance_hourly", group.instance_type)
    gpu_hour = None if hourly is None or not spec.gpus else hourly / spec.gpus
    _, pod_gpus, _ = inf.pod_shape()
    model = config.training.model
    tps, basis = generation_tokens_per_s(
        group.instance_type,
        parameters=model.parameters(),
        forward_flops=flops_per_token(model) / 3,
        dtype=inf.gpu_dtype if pod_gpus else "float32",
        sequences=inf.max_batch_size,
        gpus_per_replica=inf.gpus_per_replica,
        mbu=mbu,
        what=f"{_model_name(model)}, the training run's model",
        batch_field="inference.max_batch_size",
    )
    out = [
        _serving(
            f"serving: {inf.app_name}",
            group.instance_type,
            spec.accelerator,
            gpus=inf.worker_pods()[1] * pod_gpus,
            gpu_hour=gpu_hour,
            tps=tps,
            basis=basis,
        )
    ]
    if inf.llm.enabled:
        llm = inf.llm
        lgroup = inf.resolved_llm_group(config.hyperpod)
        lspec = catalog.instance_spec(lgroup.instance_type)
        lhourly = prices.price("hyperpod_instance_hourly", lgroup.instance_type)
        out.append(
            _serving(
                "serving: llm",
                lgroup.instance_type,
                lspec.accelerator,
                gpus=llm.max_replicas * llm.tensor_parallel_size,
                gpu_hour=None if lhourly is None or not lspec.gpus else lhourly / lspec.gpus,
                tps=None,
                basis=(
                    f"inference.llm serves {llm.model_id!r} from {llm.model_source}, whose size the config "
                    "does not state: not priced"
                ),
            )
        )
    return out


def generation_tokens_per_s(
    instance_type: str,
    *,
    parameters: int,
    forward_flops: float,
    dtype: str,
    sequences: int,
    gpus_per_replica: float,
    mbu: float = SERVING_MBU,
    what: str,
    batch_field: str,
) -> tuple[float | None, str]:
    """Generated tokens per second per GPU, and what the figure rests on. A decode step reads every
    weight once for all the ``sequences`` it advances, so a replica makes ``mbu`` x the GPU's
    memory bandwidth (config/catalog.py) / the weights' bytes steps per second, one token per
    sequence each; capped by compute at the training MFU of the chip's dense bf16 peak over the
    forward FLOPs per token. KV-cache reads, prefill and partly filled batches are not counted, so
    the figure is an upper bound. A replica's model sits on one GPU; with more GPUs per replica
    the rest idle. None: not priced (the basis says why)."""
    spec = catalog.instance_spec(instance_type)
    bandwidth = catalog.memory_bandwidth_gbps(instance_type)
    if not spec.gpus or gpus_per_replica <= 0:
        return None, "replicas on CPUs: not priced"
    if bandwidth is None:
        return None, f"no memory bandwidth for {spec.accelerator} in config/catalog.py: not priced"
    weight_bytes = parameters * _DTYPE_BYTES[dtype]
    steps = mbu * bandwidth * 1e9 / weight_bytes
    per_gpu = steps * sequences / max(gpus_per_replica, 1.0)
    basis = (
        f"decode roofline (assumed): {mbu:.0%} of the {spec.accelerator}'s {bandwidth:g} GB/s over "
        f"{weight_bytes / 1e9:.3g} GB of {dtype} weights per step ({what}, {parameters / 1e9:.3g}B parameters), "
        f"{sequences} sequences per step ({batch_field})"
    )
    if gpus_per_replica > 1:
        basis += f", one of {gpus_per_replica:g} GPUs per replica decoding"
    peak = catalog.dense_bf16_tflops(instance_type)
    if peak is not None and dtype == "bfloat16":
        cap = TRAINING_MFU * peak * 1e12 / forward_flops
        if cap < per_gpu:
            per_gpu = cap
            basis += f"; compute-bound at {TRAINING_MFU:.1%} of the {peak:g} TFLOP/s dense bf16 peak"
        else:
            basis += f"; compute cap {cap:,.0f} tokens/s not reached"
    return per_gpu, basis + "; KV-cache reads and prefill not counted (an upper bound)"


def _serving(
    workload: str, instance_type: str, chip: str, *, gpus: int, gpu_hour: float | None, tps: float | None, basis: str
) -> TokenCost:
    if gpu_hour is None:
        basis = f"no price for {instance_type} in config/prices.yaml"
    return TokenCost(
        workload=workload,
        instance_type=instance_type,
        chip=chip,
        gpus=gpus,
        gpu_hour=gpu_hour,
        tokens_per_s_per_gpu=tps,
        basis=basis,
        goodput=None,
        per_million=None if gpu_hour is None or tps is None else gpu_hour / 3600 / tps * 1e6,
    )


def _model_name(m: ModelSize) -> str:
    return f"preset {m.preset}" if m.preset else f"{m.arch}, {m.n_layer} layers x {m.n_embd}"
