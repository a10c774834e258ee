"""What a serving replica pays for its model, measured in one run: the memory of a load, the
speed the key/value cache gives, and the pause a reload's swap causes.

- **load**: peak resident memory growth of loading the served model from a job checkpoint
  (model and AdamW state after one step, sharded as the training job writes it), as a multiple
  of the weights' bytes, and the wall time. The replica's load (``loading.load_model``: only the
  model's entries, straight into the model) against gathering the whole checkpoint and keeping
  the model's keys (``checkpoint.load(keys=["model"])``, then ``load_state_dict``), each in a
  fresh process (``VmHWM``, reset just before the load).
- **cache**: tokens/s of one greedy request, 256 new tokens after a 128-token prompt, through the
  key/value cache against recomputing the whole context at every step, on the Llama; runs
  interleave, the median of ``--repeats`` is reported.
- **reload**: a replica (``app.Generate``, outside Serve) generates back to back while a newer
  checkpoint is reloaded: how long the swap held new work (``last_swap_pause_s``: waiting for
  the running batch, then freeing the old model and placing the new one) and the request
  latencies before and around it. On the CPU, placing is free; on a GPU it is the host-to-device
  copy of the weights.
- **swap on a GPU** (``--device cuda``): the replica's reload steps on the device, without Ray
  Serve (the GPU machine has no Ray): the served model placed and generating with its cache, the
  newer checkpoint read off the device (``loading.load_model``), then ``loading.swap``, the call
  ``Generate._swap`` makes. Reported: the device's peak (``torch.cuda.max_memory_allocated``) as
  a multiple of the model's bytes, and the swap's seconds (free, then the host-to-device copy).

    python bench/serving_model.py [--layers 8 --width 512] [--device cpu|cuda] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from workloads.common.model import GPT, Llama, LlamaConfig

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
RUN = "bench-run"


def llama(layers: int, width: int, block_size: int) -> LlamaConfig:
    from workloads.common.model import LlamaConfig

    heads = width // 64
    return LlamaConfig(
        n_layer=layers,
        n_head=heads,
        n_kv_head=max(1, heads // 4),
        n_embd=width,
        ffn_hidden=3 * width,
        block_size=block_size,
    )


def save_job_checkpoint(storage: Path, config: LlamaConfig, step: int) -> None:
    """The training job's checkpoint: model and AdamW state after one step, pickled progress."""
    import torch
    from torch.distributed.checkpoint.state_dict import get_state_dict

    from workloads.common import checkpoint as ckpt
    from workloads.common.model import build

    torch.manual_seed(step)
    model = build(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, config.vocab_size, (1, 8))
    _, loss = model(x, x)
    assert loss is not None, "targets given"
    loss.backward()
    optimizer.step()
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd, "progress": pickle.dumps({"step": step})}
    path = storage / RUN / ckpt.dir_name(step)
    ckpt.save_sharded(str(path), state, {"step": step, "model_config": config.to_dict()}).result()


def child_load(how: str, storage: str, warmup: str) -> None:
    """One load in this fresh process; prints {"weights", "growth", "seconds"}."""
    import torch

    from workloads.common import checkpoint as ckpt
    from workloads.common import procfs
    from workloads.common.model import build
    from workloads.inference import loading

    torch.set_num_threads(1)

    def load(where: str) -> GPT | Llama:
        if how == "replica":
            return loading.load_model(where, RUN).model
        _, path = ckpt.list_checkpoints(where, RUN)[0]
        loaded = ckpt.load(path, keys=["model"])
        model = build(loading.model_config_of(loaded.meta))
        model.load_state_dict(loaded.state["model"])
        return model

    load(warmup)  # torch's and DCP's lazy set-up is not part of the measure
    before = procfs.rss_kib("self")
    procfs.reset_peak_rss()
    start = time.perf_counter()
    model = load(storage)
    seconds = time.perf_counter() - start
    growth = (procfs.peak_rss_kib() - before) * 1024
    print(json.dumps({"weights": loading.weight_bytes(model), "growth": growth, "seconds": seconds}))


def measure_load(storage: Path, warmup: Path) -> dict[str, Any]:
    out = {}
    for how in ("gather", "replica"):
        proc = subprocess.run(
            [sys.executable, __file__, "--child-load", how, str(storage), str(warmup)],
            capture_output=True,
            text=True,
            check=True,
        )
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        got["ratio"] = got["growth"] / got["weights"]
        out[how] = got
    return out


def measure_cache(config: LlamaConfig, device: str, dtype: torch.dtype, repeats: int) -> dict[str, Any]:
    import torch

    from workloads.common.model import build
    from workloads.inference import engine

    torch.manual_seed(0)
    model = build(config).to(device=device, dtype=dtype).eval()
    prompt = torch.randint(0, config.vocab_size, (128,)).tolist()
    rates: dict[str, list[float]] = {"cache": [], "no_cache": []}
    for _ in range(repeats):
        for name, use_cache in (("cache", True), ("no_cache", False)):
            start = time.perf_counter()
            (out,) = engine.generate_batch(model, [engine.GenRequest(prompt, 256, 0.0)], use_cache)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            rates[name].append(len(out) / (time.perf_counter() - start))
    cache, plain = statistics.median(rates["cache"]), statistics.median(rates["no_cache"])
    return {"tokens_per_s": {"cache": cache, "no_cache": plain}, "runs": rates, "ratio": cache / plain}


def measure_reload(storage: Path, config: LlamaConfig, tokens: int) -> dict[str, Any]:
    import torch

    from workloads.common.model import encode
    from workloads.inference import engine, loading
    from workloads.inference.app import Generate

    # The newer checkpoint is written first and moved into the run when the reload starts.
    later = storage / "later"
    save_job_checkpoint(later, config, step=2)

    async def go() -> dict[str, Any]:
        gen = Generate(str(storage), RUN)
        latencies: list[tuple[float, float]] = []  # (start, seconds)
        stop = asyncio.Event()

        async def client() -> None:
            while not stop.is_set():
                start = time.perf_counter()
                # serve.batch's wrapper (functools.wraps) keeps __wrapped__; its annotation does not say so.
                await Generate._generate.__wrapped__(  # type: ignore[attr-defined]
                    gen, [[engine.GenRequest(encode("reload"), tokens, 0.0)]]
                )
                latencies.append((start, time.perf_counter() - start))

        task = asyncio.create_task(client())
        await asyncio.sleep(2.0)
        (later / RUN / "checkpoint_000000002").rename(storage / RUN / "checkpoint_000000002")
        if gen.device.is_gpu:
            torch.cuda.reset_peak_memory_stats()
        begin = time.perf_counter()
        await gen.reconfigure({"reload": "step-2"})
        end = time.perf_counter()
        await asyncio.sleep(1.0)
        stop.set()
        await task
        before = [s for t, s in latencies if t + s < begin]
        around = [s for t, s in latencies if t + s >= begin and t <= end]
        gpu: dict[str, float] = {}
        if gen.device.is_gpu:  # the device's peak during the reload, the client's batches included
            gpu["gpu_peak_over_model"] = torch.cuda.max_memory_allocated() / loading.weight_bytes(gen.loaded.model)
        return {
            **gpu,
            "swap_pause_s": gen.last_swap_pause_s,
            "reconfigure_s": end - begin,
            "request_s_before": {"median": statistics.median(before), "max": max(before)},
            "request_s_around_reload_max": max(around) if around else None,
            "served_step": gen.loaded.step,
        }

    return asyncio.run(go())


def measure_swap(storage: Path, config: LlamaConfig, device_name: str, dtype: torch.dtype) -> dict[str, Any]:
    import torch

    from workloads.common.model import encode
    from workloads.inference import engine, loading

    device = loading.Device(device_name)

    def sync() -> None:
        if device.is_gpu:
            torch.cuda.synchronize()

    served = loading.load_model(str(storage), RUN, dtype)
    served.model = device.place(served.model)
    model_bytes = loading.weight_bytes(served.model)
    later = storage / "later"
    save_job_checkpoint(later, config, step=2)
    (later / RUN / "checkpoint_000000002").rename(storage / RUN / "checkpoint_000000002")
    sync()
    if device.is_gpu:
        torch.cuda.reset_peak_memory_stats()
    # A request on the served model (its key/value cache is part of what the device holds).
    engine.generate_batch(served.model, [engine.GenRequest(encode("reload"), 64, 0.0)])
    fresh = loading.load_model(str(storage), RUN, dtype)  # read and verified off the device
    start = time.perf_counter()
    swapped = loading.swap(device, served, fresh)
    sync()
    swap_s = time.perf_counter() - start
    engine.generate_batch(swapped.model, [engine.GenRequest(encode("reload"), 64, 0.0)])
    sync()
    return {
        "served_step": swapped.step,
        "model_bytes": model_bytes,
        "gpu_peak_over_model": torch.cuda.max_memory_allocated() / model_bytes if device.is_gpu else None,
        "swap_s": swap_s,
        "dtype": str(dtype),
        "device": torch.cuda.get_device_name() if device.is_gpu else "cpu",
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--child-load", nargs=3, metavar=("HOW", "STORAGE", "WARMUP"), help=argparse.SUPPRESS)
    p.add_argument("--layers", type=int, default=8, help="Llama layers of the load and reload model")
    p.add_argument("--width", type=int, default=512, help="Llama width (n_embd) of the load and reload model")
    p.add_argument("--cache-layers", type=int, default=4)
    p.add_argument("--cache-width", type=int, default=256)
    p.add_argument("--device", default="cpu", help="device of the cache and reload measurements")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--dir", default=None, help="where checkpoints are written (default: a temp dir under out/)")
    p.add_argument("--out", default=str(REPO / "out" / "bench" / "serving_model.json"))
    args = p.parse_args(argv)
    if args.child_load:
        child_load(*args.child_load)
        return 0

    import torch

    from workloads.common.model import LlamaConfig, count_parameters
    from workloads.inference import loading

    torch.set_num_threads(1)
    base = Path(args.dir) if args.dir else REPO / "out" / "bench"
    base.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"command": " ".join(["python", "bench/serving_model.py", *(argv or sys.argv[1:])])}
    with tempfile.TemporaryDirectory(prefix="serving-bench-", dir=base) as tmp:
        storage, warmup = Path(tmp) / "ckpt", Path(tmp) / "warmup"
        config = llama(args.layers, args.width, 256)
        save_job_checkpoint(storage, config, step=1)
        save_job_checkpoint(warmup, LlamaConfig(), step=1)
        result["load"] = measure_load(storage, warmup)
        result["load"]["params"] = count_parameters(config)
        load = result["load"]
        print(
            f"load: peak RSS growth {load['replica']['ratio']:.2f}x the weights' bytes "
            f"({load['replica']['seconds']:.2f} s) against {load['gather']['ratio']:.2f}x "
            f"({load['gather']['seconds']:.2f} s) gathering the whole checkpoint; "
            f"{load['params'] / 1e6:.1f}M parameters",
            flush=True,
        )
        if args.device.startswith("cuda"):
            result["swap"] = measure_swap(storage, config, args.device, loading.DTYPES[args.dtype])
            w = result["swap"]
            assert w["served_step"] == 2, f"the swap serves the newer checkpoint: {w}"
            print(
                f"swap on {w['device']}: device peak {w['gpu_peak_over_model']:.2f}x the model's "
                f"{w['model_bytes'] / 2**30:.2f} GiB ({w['dtype']}) through load, swap and generation; "
                f"the swap took {w['swap_s'] * 1000:.0f} ms",
                flush=True,
            )
        else:
            result["reload"] = measure_reload(storage, config, tokens=16)
            r = result["reload"]
            print(
                f"reload: swap held new work {r['swap_pause_s'] * 1000:.1f} ms; reconfigure took "
                f"{r['reconfigure_s']:.2f} s while the old model served; request latency "
                f"{r['request_s_before']['median'] * 1000:.1f} ms median before, "
                f"{(r['request_s_around_reload_max'] or 0) * 1000:.1f} ms max around the reload",
                flush=True,
            )
    cache_config = llama(args.cache_layers, args.cache_width, 128 + 256)
    result["cache"] = measure_cache(cache_config, args.device, loading.DTYPES[args.dtype], args.repeats)
    c = result["cache"]
    print(
        f"cache: {c['tokens_per_s']['cache']:.0f} tokens/s with the key/value cache against "
        f"{c['tokens_per_s']['no_cache']:.0f} without: {c['ratio']:.1f}x "
        f"(256 new tokens after 128, {args.device}, {args.dtype})",
        flush=True,
    )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
