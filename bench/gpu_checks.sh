#!/usr/bin/env bash
# The GPU checks of docs/benchmarks.md in one run on one GPU (under 10 minutes on an H200):
#   1. the training job's step (bench/training_gpu.py) on the largest preset that fits the GPU,
#      with default kernels, then with deterministic kernels (training.deterministic);
#   2. a serving replica's load, swap on the GPU (max_memory_allocated) and the key/value cache's
#      speed-up in the serving dtype (bench/serving_model.py --device cuda);
#   3. a restart's checkpoint verification by N ranks against by one on the machine's CPU cores
#      (bench/checkpoint_verify.py, gloo): N = 4 needs 4 free cores, which the development
#      machine lacks. In $VERIFY_DIR (default /tmp: a container's /dev/shm may be 64 MB).
# Needs only PyTorch (with pyarrow) and this checkout. The plans are written beforehand where the
# config stack is installed:
#   .venv/bin/python bench/training_gpu.py --env prod --write-plan out/gpu-plan.json
#   .venv/bin/python bench/training_gpu.py --env prod --preset llama-3b --write-plan out/gpu-plan-small.json
#   4. issue 40's comparison on the plan's model (prod: llama-7b) at production's sequence length
#      (SEQ, default the plan's block_size) and vocabulary (VOCAB, default the plan's: the byte
#      vocabulary; VOCAB=128256 is Llama 3's tokenizer): eager, compile, compile + float8
#      (torchao, needs it installed), and compile + float8 with selective recomputation; tokens/s,
#      step time, peak memory and MFU of each, and each against eager (CMP_STEPS steps, 12).
# Usage: bench/gpu_checks.sh OUTDIR [PLAN [FALLBACK_PLAN]]
set -u
out=${1:?usage: bench/gpu_checks.sh OUTDIR [PLAN [FALLBACK_PLAN]]}
plan=${2:-out/gpu-plan.json}
fallback=${3:-out/gpu-plan-small.json}
py=${PYTHON:-python3}
steps=${STEPS:-20}
warmup=${WARMUP:-5}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
"$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'

step() {  # step NAME PLAN [ARGS...]: the training bench, its log and figures under $out
    local name=$1 p=$2
    shift 2
    echo "== training step: $name ($p)"
    "$py" bench/training_gpu.py --plan "$p" --device cuda --steps "$steps" --warmup "$warmup" \
        --out "$out/$name.json" "$@" 2>&1 | tee "$out/$name.log"
    return "${PIPESTATUS[0]}"
}

used=$plan
if ! step train "$plan"; then
    echo "== $plan did not run (see train.log); the smaller plan instead"
    used=$fallback
    step train "$fallback" || exit 1
fi
step train-deterministic "$used" --deterministic || echo "== deterministic kernels failed: see train-deterministic.log"

echo "== compile, float8 and selective recomputation against eager (${VOCAB:-plan} vocabulary, ${SEQ:-plan} tokens)"
shape=()
[ -n "${VOCAB:-}" ] && shape+=(--vocab-size "$VOCAB")
[ -n "${SEQ:-}" ] && shape+=(--block-size "$SEQ")
cmp_steps=${CMP_STEPS:-12}
variants=(eager compile)
if "$py" -c 'import torchao' 2>/dev/null; then
    variants+=(compile-float8 compile-float8-selective)
else
    echo "== torchao is not installed: the float8 variants are skipped (pip install torchao==0.18.0)"
fi
for v in "${variants[@]}"; do
    flags=()
    case $v in
        compile) flags=(--compile) ;;
        compile-float8) flags=(--compile --float8) ;;
        compile-float8-selective) flags=(--compile --float8 --activation-checkpointing selective) ;;
    esac
    echo "== $v"
    "$py" bench/training_gpu.py --plan "$used" --device cuda --steps "$cmp_steps" --warmup 4 \
        "${shape[@]}" "${flags[@]}" --out "$out/cmp-$v.json" 2>&1 | tee "$out/cmp-$v.log" \
        || echo "== $v failed: see cmp-$v.log"
done
"$py" - "$out" "${variants[@]}" <<'PY'
import json, sys
from pathlib import Path
out, names = Path(sys.argv[1]), sys.argv[2:]
runs = {n: json.loads((out / f"cmp-{n}.json").read_text()) for n in names if (out / f"cmp-{n}.json").exists()}
base = runs.get("eager")
print(f"{'variant':26} {'tokens/s':>10} {'step ms':>9} {'peak GiB':>9} {'MFU':>7} {'x eager':>8} {'1st step s':>10}")
for n, r in runs.items():
    ratio = r["tokens_per_s"] / base["tokens_per_s"] if base else float("nan")
    mfu = "n/a" if r["mfu"] is None else f"{r['mfu']:.1%}"
    print(f"{n:26} {r['tokens_per_s']:10.0f} {r['step_ms']:9.1f} {r['peak_memory_gib'] or 0:9.1f} {mfu:>7} {ratio:8.2f} {r['first_step_s']:10.1f}")
PY

echo "== serving: load, swap on the GPU, key/value cache (bf16)"
"$py" bench/serving_model.py --device cuda --dtype bfloat16 --layers 12 --width 1536 \
    --cache-layers 16 --cache-width 2048 --repeats 3 --dir /tmp --out "$out/serving.json" 2>&1 | tee "$out/serving.log"
serving=${PIPESTATUS[0]}

echo "== checkpoint verification by N ranks against by one (CPU, $(nproc) cores)"
"$py" bench/checkpoint_verify.py --ranks 2,4,8 --repeats 7 --dir "${VERIFY_DIR:-/tmp}" \
    --out "$out/verify.json" 2>&1 | tee "$out/verify.log"
verify=${PIPESTATUS[0]}
exit $((serving || verify))
