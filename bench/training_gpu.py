"""The training job's step on one GPU in bf16: tokens/s and model-FLOPs utilisation (MFU).

    .venv/bin/python bench/training_gpu.py --env prod --write-plan out/gpu-plan.json   # here
    python3 bench/training_gpu.py --plan out/gpu-plan.json --out $OUT/gpu.json        # on the GPU

The step is the job's own (``workloads.training.job.train_step``): its Llama-style model,
byte-level data windows, AdamW from ``make_optimizer`` (fused on CUDA), bf16 autocast when the
environment's ``training.precision`` says bf16 (FSDP on one GPU is plain training), gradient
clipping, the LR schedule and activation checkpointing as configured, eager PyTorch as the job
runs it. The batch per worker and the optimisation settings come from the environment's config
(``--env``); the model is the largest preset (``config.training.PRESETS``) whose estimated
memory (``sizing.training.memory_per_gpu``) fits one H200 (``--preset`` picks another). The GPU machine this workplace lends has PyTorch but not the project's config
stack (pydantic, botocore) and Ray's wheel (79 MB) is over what travels to it (64 MiB), so the
config is resolved here into a small plan file (``--write-plan``) and the GPU run reads only
that (``--plan``): torch and this repository's code, nothing else. Ray itself is not in the
loop: this measures the GPU work of one rank, not Ray's overhead (``training_throughput.py``).

MFU = tokens/s x model FLOPs per token (``workloads.common.model.flops_per_token``: 6N plus
attention) / peak. The peak is the GPU's dense bf16 datasheet figure where config/catalog.py
knows it (``GPU_DENSE_BF16_TFLOPS``, carried in the plan) or ``--peak-tflops``; on CUDA the bench
also measures the bf16 matrix-product rate on the spot (8192^3, the mean of 10 after 3 warm-ups) and prints MFU against that
as a second, achievable ceiling. On a CPU (``--device cpu``, for tests and dry runs) the job
trains in fp32 and MFU is printed only with ``--peak-tflops``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from config.training import Training

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# The chip of each name torch.cuda.get_device_name() gives. Its dense bf16 peak is the chip's
# datasheet figure in config/catalog.py (GPU_DENSE_BF16_TFLOPS), carried to the GPU machine in the
# plan. The PCIe and NVL parts are slower and are deliberately not matched: pass --peak-tflops.
DEVICE_CHIPS = {"NVIDIA H200": "H200", "NVIDIA H100 80GB HBM3": "H100"}

PLAN_KEYS = (
    "env",
    "preset",
    "model",
    "batch_size_per_worker",
    "precision",
    "learning_rate",
    "weight_decay",
    "warmup_steps",
    "grad_clip",
    "activation_checkpointing",
    "data_max_bytes",
    "dense_bf16_tflops",
)
# The GPU the default plan is sized for (one of the p5e/p5en's eight).
PLAN_INSTANCE_TYPE = "ml.p5e.48xlarge"


class BenchError(Exception):
    """Bad input: printed as one line, exit status 2."""


def largest_preset_on_one_gpu(t: Training, instance_type: str = PLAN_INSTANCE_TYPE) -> str:
    """The largest preset whose training state and activations fit one GPU of ``instance_type``
    with ``t``'s batch, precision and activation checkpointing."""
    from config.catalog import instance_spec
    from config.training import PRESETS
    from sizing.training import memory_problems

    spec = instance_spec(instance_type)
    for name in sorted(PRESETS, key=lambda n: PRESETS[n]["params"], reverse=True):
        one = t.model_copy(update={"model": t.model.model_validate({"preset": name}), "sharding": "fsdp"})
        if not memory_problems(one, spec, 1, instance_type=instance_type):
            return name
    raise BenchError(
        f"no preset fits one {spec.accelerator} of {instance_type} with batch_size_per_worker {t.batch_size_per_worker}"
    )


def device_peaks() -> dict[str, float]:
    """Dense bf16 peak TFLOP/s by device name, from config/catalog.py (here only)."""
    from config import catalog

    return {name: catalog.GPU_DENSE_BF16_TFLOPS[chip] for name, chip in DEVICE_CHIPS.items()}


def plan_for_env(env: str, preset: str | None = None) -> dict[str, Any]:
    """What one rank of the job would train, from that environment's config (here only)."""
    from config import ConfigError
    from config.loader import load_environment
    from config.training import PRESETS, ModelSize

    try:
        t = load_environment(env).training
    except ConfigError as e:
        raise BenchError(e.render()) from None
    if preset is not None and preset not in PRESETS:
        raise BenchError(f"--preset {preset!r}: allowed: {', '.join(PRESETS)}")
    preset = preset or largest_preset_on_one_gpu(t)
    return {
        "env": env,
        "preset": preset,
        "model": ModelSize(preset=preset).architecture(),
        # true/false for full/none (the plan files written before selective existed), "selective".
        "activation_checkpointing": {"full": True, "none": False}.get(
            t.activation_checkpointing, t.activation_checkpointing
        ),
        "batch_size_per_worker": t.batch_size_per_worker,
        "precision": t.precision,
        "learning_rate": t.learning_rate,
        "weight_decay": t.weight_decay,
        "warmup_steps": t.warmup_steps,
        "grad_clip": t.grad_clip,
        # Enough windows for the measured steps; the corpus size does not change a step's work.
        "data_max_bytes": 16 << 20,
        "dense_bf16_tflops": device_peaks(),
    }


def read_plan(path: str) -> dict[str, Any]:
    try:
        plan: dict[str, Any] = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise BenchError(f"--plan {path}: cannot read a JSON plan ({e}); write one with --write-plan") from None
    missing = [k for k in PLAN_KEYS if k not in plan]
    unknown = sorted(set(plan) - set(PLAN_KEYS))
    if missing or unknown:
        raise BenchError(
            f"--plan {path}: missing keys {missing}, unknown keys {unknown}; allowed: {', '.join(PLAN_KEYS)}"
        )
    return plan


def pick_device(name: str) -> torch.device:
    import torch

    cuda = torch.cuda.is_available()
    if name == "cuda" and not cuda:
        raise BenchError(
            "--device cuda: no CUDA device is visible (torch.cuda.is_available() is False); allowed here: cpu, auto"
        )
    if name == "auto":
        name = "cuda" if cuda else "cpu"
    return torch.device(name)


def peak_for(device: torch.device, override: float | None, peaks: dict[str, float]) -> tuple[float | None, str]:
    """(peak TFLOP/s, where it comes from)."""
    import torch

    if override is not None:
        return override, "--peak-tflops"
    if device.type != "cuda":
        return None, f"no dense bf16 peak is known for {device.type!r}; pass --peak-tflops"
    name = torch.cuda.get_device_name(device)
    if name in peaks:
        return peaks[name], f"{name} datasheet, dense bf16"
    return None, f"no dense bf16 peak is known for {name!r} (known: {', '.join(peaks)}); pass --peak-tflops"


def matmul_tflops(device: torch.device, n: int = 8192, reps: int = 10) -> float:
    """bf16 n x n x n matrix products on random data, mean of `reps` after 3 warm-ups (CUDA)."""
    import torch

    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        a @ b
    end.record()
    torch.cuda.synchronize(device)
    tflops: float = 2 * n**3 * reps / (start.elapsed_time(end) / 1e3) / 1e12
    return tflops


def train_steps(
    plan: dict[str, Any],
    device: torch.device,
    steps: int,
    warmup: int,
    progress: Callable[[str], None] = print,
    *,
    compile: bool = False,
    float8: bool = False,
    activation_checkpointing: str | None = None,
    checkpoint_every: int = 2,
    model_overrides: dict[str, int] | None = None,
) -> dict[str, Any]:
    """The job's step, `steps` times; tokens/s over the steps after `warmup`. ``compile``,
    ``float8`` (CUDA) and ``activation_checkpointing`` (none, selective: every
    ``checkpoint_every``-th block, full; default the plan's) as workloads/training/parallelize.py
    applies them; ``model_overrides``: e.g. vocab_size and block_size."""
    import torch

    from workloads.common.model import build, config_from_dict, flops_per_token
    from workloads.training.data import ByteWindows, DataPosition, load_corpus
    from workloads.training.job import lr_schedule, make_optimizer, train_step
    from workloads.training.parallelize import checkpoint_mode, convert_float8

    torch.manual_seed(1234)
    cfg = config_from_dict({**plan["model"], **(model_overrides or {})})
    with device:  # initialised on the device it trains on: a 7B model is slow to initialise on a CPU
        model = build(cfg)
    mode = checkpoint_mode(activation_checkpointing or plan["activation_checkpointing"])
    model.activation_checkpointing = mode != "none"
    model.checkpoint_every = checkpoint_every if mode == "selective" else 1
    if float8 and device.type == "cuda":
        convert_float8(model)
    if compile:
        from workloads.common.model import Llama

        for block in model.layers if isinstance(model, Llama) else model.blocks:
            block.compile()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    compile_s = None
    data = ByteWindows(load_corpus(None, plan["data_max_bytes"]), cfg.block_size, 1234)
    pos = DataPosition()
    opt = make_optimizer(
        model, learning_rate=plan["learning_rate"], weight_decay=plan["weight_decay"], fused=device.type == "cuda"
    )
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_schedule(plan["warmup_steps"], steps))
    amp = device.type == "cuda" and plan["precision"] == "bf16"  # as the job: CPU runs fp32
    batch = plan["batch_size_per_worker"]
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda *_: None)
    model.train()
    t0 = loss_value = None
    t_start = time.perf_counter()
    for step in range(1, steps + 1):
        x, y = data.next_batch(pos, rank=0, world_size=1, batch_size=batch)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = train_step(
            model, opt, sched, x, y, grad_clip=plan["grad_clip"], autocast_dtype=torch.bfloat16 if amp else None
        )
        if step == 1:
            sync(device)
            compile_s = time.perf_counter() - t_start  # the first step: compilation, if any, and warm-up
        if step == warmup:
            sync(device)
            t0 = time.perf_counter()
        loss_value = loss.item()  # every step, as the job does (it waits for the GPU's step)
        if step % 10 == 0 or step == steps:
            progress(f"step {step}/{steps} loss {loss_value:.4f}")
    sync(device)
    assert t0 is not None, "main checks warmup < steps"
    elapsed = time.perf_counter() - t0
    tokens = (steps - warmup) * batch * cfg.block_size
    return {
        "tokens_per_s": tokens / elapsed,
        "step_ms": elapsed / (steps - warmup) * 1e3,
        "measured_steps": steps - warmup,
        "tokens_per_step": batch * cfg.block_size,
        "flops_per_token": flops_per_token(cfg),
        "final_loss": loss_value,
        "params": sum(p.numel() for p in model.parameters()),
        "autocast_bf16": amp,
        "first_step_s": compile_s,
        "peak_memory_gib": torch.cuda.max_memory_allocated(device) / (1 << 30) if device.type == "cuda" else None,
        "compile": compile,
        "float8": float8 and device.type == "cuda",
        "activation_checkpointing": mode,
        "vocab_size": cfg.vocab_size,
        "block_size": cfg.block_size,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--env", help="environment whose training config to use (needs the config stack)")
    src.add_argument("--plan", help="a plan file written by --write-plan (the GPU machine's way)")
    p.add_argument("--write-plan", metavar="PATH", help="with --env: write the plan and stop")
    p.add_argument("--preset", help="with --env: this model preset instead of the largest that fits one H200")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=10, help="steps before the timed window")
    p.add_argument("--peak-tflops", type=float, help="dense bf16 peak of the device, TFLOP/s")
    p.add_argument(
        "--deterministic",
        action="store_true",
        help="deterministic kernels, as training.deterministic turns on (workloads.training.determinism)",
    )
    p.add_argument("--compile", action="store_true", help="torch.compile each block (training.compile)")
    p.add_argument("--float8", action="store_true", help="torchao float8 linear layers, CUDA only (training.float8)")
    p.add_argument(
        "--activation-checkpointing",
        choices=("none", "selective", "full"),
        help="instead of the plan's (training.activation_checkpointing); selective: every second block",
    )
    p.add_argument("--vocab-size", type=int, help="instead of the plan's model's (e.g. 128256, Llama 3's tokenizer)")
    p.add_argument("--block-size", type=int, help="sequence length instead of the plan's model's")
    p.add_argument("--out", help="write the figures as JSON here too")
    args = p.parse_args(argv)
    try:
        if args.write_plan and not args.env:
            raise BenchError("--write-plan needs --env")
        if not 1 <= args.warmup < args.steps:
            raise BenchError(f"--warmup {args.warmup} with --steps {args.steps}: allowed: 1 <= warmup < steps")
        if args.peak_tflops is not None and args.peak_tflops <= 0:
            raise BenchError(f"--peak-tflops {args.peak_tflops}: allowed: a positive number")
        plan = plan_for_env(args.env, args.preset) if args.env else read_plan(args.plan)
        if args.write_plan:
            Path(args.write_plan).parent.mkdir(parents=True, exist_ok=True)
            Path(args.write_plan).write_text(json.dumps(plan, indent=2, sort_keys=True) + "\n")
            print(
                f"wrote {args.write_plan} (env {plan['env']}: model {plan['model']}, "
                f"batch {plan['batch_size_per_worker']} per worker, {plan['precision']})"
            )
            return 0
        if args.deterministic:
            from workloads.training.determinism import use_deterministic

            use_deterministic(True)  # before the first CUDA work, as the job does
        device = pick_device(args.device)
        peak, peak_from = peak_for(device, args.peak_tflops, plan["dense_bf16_tflops"])
    except BenchError as e:  # the option or file first, then what is wrong and what is allowed
        print(e, file=sys.stderr)
        return 2

    import torch

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({os.cpu_count()} cores)"
    if device.type != "cuda":
        precision = f"fp32 (the environment says {plan['precision']}; on a CPU the job trains in fp32)"
    else:
        precision = "bf16 autocast" if plan["precision"] == "bf16" else "fp32"
    print(
        f"env {plan['env']}: model {plan['model']}, batch {plan['batch_size_per_worker']} x "
        f"{plan['model']['block_size']} tokens, {precision} on {name}, torch {torch.__version__}; "
        f"{args.steps} steps, timed after step {args.warmup}"
        + (", deterministic kernels" if args.deterministic else ""),
        flush=True,
    )
    overrides = {k: v for k, v in (("vocab_size", args.vocab_size), ("block_size", args.block_size)) if v}
    r = train_steps(
        plan,
        device,
        args.steps,
        args.warmup,
        progress=lambda m: print(m, flush=True),
        compile=args.compile,
        float8=args.float8,
        activation_checkpointing=args.activation_checkpointing,
        model_overrides=overrides,
    )
    r.update(
        env=plan["env"],
        device=name,
        torch=torch.__version__,
        precision=plan["precision"],
        peak_tflops=peak,
        peak_from=peak_from,
        model=plan["model"],
        deterministic=args.deterministic,
    )
    achieved = r["tokens_per_s"] * r["flops_per_token"] / 1e12
    r["model_tflops"] = achieved
    r["mfu"] = achieved / peak if peak else None
    print(
        f"tokens/s {r['tokens_per_s']:.0f} ({r['step_ms']:.1f} ms/step, {r['params'] / 1e6:.1f}M parameters, "
        f"{r['flops_per_token'] / 1e9:.2f} GFLOP/token): {achieved:.1f} TFLOP/s of model FLOPs"
    )
    print(f"MFU {r['mfu']:.1%} of {peak} TFLOP/s ({peak_from})" if peak else f"MFU: n/a ({peak_from})")
    print(
        f"variant: compile {r['compile']}, float8 {r['float8']}, activation_checkpointing "
        f"{r['activation_checkpointing']}, vocab {r['vocab_size']}, sequence {r['block_size']}; first step "
        f"{r['first_step_s']:.1f} s"
        + ("" if r["peak_memory_gib"] is None else f"; peak memory {r['peak_memory_gib']:.1f} GiB")
    )
    if device.type == "cuda":
        r["matmul_tflops"] = matmul_tflops(device)
        print(
            f"bf16 8192^3 matrix product here: {r['matmul_tflops']:.0f} TFLOP/s; model FLOPs are "
            f"{achieved / r['matmul_tflops']:.1%} of it"
        )
    if args.out:
        Path(args.out).write_text(json.dumps(r, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
