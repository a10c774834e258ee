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

echo "== serving: load, swap on the GPU, key/value cache (bf16)"
"$py" bench/serving_model.py --device cuda --dtype bfloat16 --layers 12 --width 1536 \
    --cache-layers 16 --cache-width 2048 --repeats 3 --dir /tmp --out "$out/serving.json" 2>&1 | tee "$out/serving.log"
serving=${PIPESTATUS[0]}

echo "== checkpoint verification by N ranks against by one (CPU, $(nproc) cores)"
"$py" bench/checkpoint_verify.py --ranks 2,4,8 --repeats 7 --dir "${VERIFY_DIR:-/tmp}" \
    --out "$out/verify.json" 2>&1 | tee "$out/verify.log"
verify=${PIPESTATUS[0]}
exit $((serving || verify))
