"""bench/training_gpu.py: the plan resolved from the environment config, the job's step run for
real (on the CPU here: no GPU on this machine or in CI), the MFU arithmetic, and bad input."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench import training_gpu as tg
from config.loader import load_environment
from config.training import PRESETS
from workloads.common.model import GPTConfig, flops_per_token

ROOT = Path(__file__).resolve().parents[2]
TINY = {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 32, "dropout": 0.0}


@pytest.fixture
def tiny_plan(tmp_path) -> Path:
    path = tmp_path / "plan.json"
    assert tg.main(["--env", "dev", "--write-plan", str(path)]) == 0
    plan = json.loads(path.read_text())
    plan.update(model=TINY, batch_size_per_worker=4)  # the small GPT (no "arch": gpt)
    path.write_text(json.dumps(plan))
    return path


def test_plan_is_the_environments_training_config(tmp_path, capsys):
    path = tmp_path / "out" / "plan.json"
    assert tg.main(["--env", "prod", "--write-plan", str(path)]) == 0
    plan = json.loads(path.read_text())
    t = load_environment("prod").training
    assert plan["env"] == "prod"
    # The largest preset that fits one H200 with prod's batch (bf16, activation checkpointing).
    assert plan["preset"] == "llama-7b" and plan["activation_checkpointing"] is True
    shape = {k: v for k, v in PRESETS["llama-7b"].items() if k != "params"}
    assert plan["model"] == {"arch": "llama", **shape}
    assert (
        plan["batch_size_per_worker"],
        plan["precision"],
        plan["learning_rate"],
        plan["weight_decay"],
        plan["warmup_steps"],
        plan["grad_clip"],
    ) == (t.batch_size_per_worker, t.precision, t.learning_rate, t.weight_decay, t.warmup_steps, t.grad_clip)
    assert sorted(plan) == sorted(tg.PLAN_KEYS)
    assert tg.read_plan(str(path)) == plan
    assert f"wrote {path} (env prod" in capsys.readouterr().out


def test_cpu_run_measures_tokens_per_s_and_mfu(tiny_plan, tmp_path, capsys):
    out = tmp_path / "gpu.json"
    rc = tg.main(
        [
            "--plan",
            str(tiny_plan),
            "--device",
            "cpu",
            "--steps",
            "12",
            "--warmup",
            "2",
            "--peak-tflops",
            "0.5",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    r = json.loads(out.read_text())
    assert r["measured_steps"] == 10
    assert r["tokens_per_step"] == 4 * 32
    assert r["tokens_per_s"] > 0
    assert r["step_ms"] == pytest.approx(r["tokens_per_step"] / r["tokens_per_s"] * 1e3)
    assert r["flops_per_token"] == flops_per_token(GPTConfig(**TINY))
    assert r["mfu"] == pytest.approx(r["tokens_per_s"] * r["flops_per_token"] / 0.5e12)
    assert r["autocast_bf16"] is False  # a CPU run trains in fp32, as the job does
    assert math.isfinite(r["final_loss"])
    text = capsys.readouterr().out
    assert "fp32 (the environment says bf16; on a CPU the job trains in fp32)" in text
    assert f"MFU {r['mfu']:.1%} of 0.5 TFLOP/s (--peak-tflops)" in text
    assert "step 10/12 loss " in text and "step 12/12 loss " in text


def test_no_peak_without_a_known_gpu(tiny_plan, capsys):
    rc = tg.main(["--plan", str(tiny_plan), "--device", "cpu", "--steps", "3", "--warmup", "1"])
    assert rc == 0
    assert "MFU: n/a (no dense bf16 peak is known for 'cpu'; pass --peak-tflops)" in capsys.readouterr().out


def test_peak_by_device_name(monkeypatch):
    cuda = torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_: "NVIDIA H200")
    peaks = tg.device_peaks()  # config/catalog.py's, as the plan carries them
    assert peaks == {"NVIDIA H200": 989.5, "NVIDIA H100 80GB HBM3": 989.5}
    assert tg.peak_for(cuda, None, peaks) == (989.5, "NVIDIA H200 datasheet, dense bf16")
    assert tg.peak_for(cuda, 700.0, peaks) == (700.0, "--peak-tflops")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_: "NVIDIA H100 PCIe")
    assert tg.peak_for(cuda, None, peaks) == (
        None,
        "no dense bf16 peak is known for 'NVIDIA H100 PCIe' (known: NVIDIA H200, "
        "NVIDIA H100 80GB HBM3); pass --peak-tflops",
    )


def test_cuda_asked_for_without_a_gpu(tiny_plan, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert tg.main(["--plan", str(tiny_plan), "--device", "cuda"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "--device cuda: no CUDA device is visible (torch.cuda.is_available() is False); allowed here: cpu, auto\n"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--env", "nosuch"],
            "-c env=nosuch: 1 configuration error:\n  - unknown environment 'nosuch'; known environments: dev, prod, staging",
        ),
        (["--env", "dev", "--steps", "5", "--warmup", "5"], "--warmup 5 with --steps 5: allowed: 1 <= warmup < steps"),
        (["--env", "dev", "--peak-tflops", "0"], "--peak-tflops 0.0: allowed: a positive number"),
    ],
)
def test_bad_input_is_one_clear_error(argv, message, capsys):
    assert tg.main(argv) == 2
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", message + "\n")


def test_bad_plan_file(tmp_path, capsys):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"env": "dev", "model": TINY, "n_layers": 3}))
    assert tg.main(["--plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"--plan {path}: missing keys ['preset', 'batch_size_per_worker', 'precision', ")
    assert "unknown keys ['n_layers']; allowed: env, preset, model, batch_size_per_worker," in err
    path.write_text("{not json")
    assert tg.main(["--plan", str(path)]) == 2
    assert capsys.readouterr().err.startswith(f"--plan {path}: cannot read a JSON plan (")


def test_a_plan_run_needs_neither_the_config_stack_nor_ray(tiny_plan):
    """The GPU machine has PyTorch but no pydantic, botocore or Ray: a --plan run must not import them."""
    code = (
        "import sys\n"
        "for m in ('pydantic', 'botocore', 'ray', 'yaml'): sys.modules[m] = None  # ImportError if used\n"
        f"sys.argv = ['training_gpu.py', '--plan', {str(tiny_plan)!r}, '--device', 'cpu', '--steps', '3', "
        "'--warmup', '1']\n"
        f"import runpy; runpy.run_path({str(ROOT / 'bench' / 'training_gpu.py')!r}, run_name='__main__')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "tokens/s " in proc.stdout


def test_cpu_run_of_the_compile_and_selective_variant_at_another_shape(tmp_path, capsys):
    """The comparison's flags (bench/gpu_checks.sh, issue 40) on a tiny Llama: compiled blocks,
    selective recomputation, a larger vocabulary and a shorter sequence; float8 is CUDA only."""
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "env": "test",
                "preset": "tiny",
                "model": {"arch": "llama", **{k: v for k, v in PRESETS["tiny"].items() if k != "params"}},
                "batch_size_per_worker": 2,
                "precision": "bf16",
                "learning_rate": 1e-3,
                "weight_decay": 0.1,
                "warmup_steps": 2,
                "grad_clip": 1.0,
                "activation_checkpointing": True,
                "data_max_bytes": 1 << 16,
                "dense_bf16_tflops": {},
            }
        )
    )
    out = tmp_path / "v.json"
    args = ["--plan", str(plan), "--device", "cpu", "--steps", "4", "--warmup", "2", "--out", str(out)]
    assert tg.main([*args, "--compile", "--activation-checkpointing", "selective", "--vocab-size", "512",
                    "--block-size", "16"]) == 0  # fmt: skip
    r = json.loads(out.read_text())
    assert (r["compile"], r["float8"], r["activation_checkpointing"]) == (True, False, "selective")
    assert (r["vocab_size"], r["block_size"], r["tokens_per_step"]) == (512, 16, 2 * 16)
    assert r["first_step_s"] > 0 and r["peak_memory_gib"] is None
    assert (
        "variant: compile True, float8 False, activation_checkpointing selective, vocab 512" in capsys.readouterr().out
    )
