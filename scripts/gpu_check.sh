#!/usr/bin/env bash
# GPU check for bulkinfer's Triton path, on a CUDA machine, in under 8 minutes, with no network:
#   1. the kernel tests (tests/kernels) compiled for the GPU, in fp32, fp16 and bf16;
#   2. each kernel timed against its PyTorch reference and torch SDPA (scripts/gpu_bench_kernels.py),
#      next to the chip's measured copy bandwidth and matmul rate;
#   3. end-to-end engine throughput on Llama-shaped random models (0.5B, 1.5B) through
#      `python -m bulkinfer.cli bench`, only if this checkout has that command: otherwise the
#      report says the step was skipped, and why;
#   4. gpu_check.json and gpu_check.md (scripts/gpu_report.py) from whatever the steps left.
#
# Usage: scripts/gpu_check.sh [OUT_DIR]        (default: benchmarks/results)
# Environment: PYTHON (default python3); GPU_CHECK_BUDGET_S (default 450 s for steps 1-3);
#   BULKINFER_BENCH_ARGS (extra arguments for `bulkinfer bench`, default below).
# Exit status: 0 every step that ran passed, 1 a step failed or timed out, 2 usage.

set -uo pipefail

if [[ $# -gt 1 || ${1:-} == -* ]]; then
    echo "usage: scripts/gpu_check.sh [OUT_DIR]" >&2
    exit 2
fi
cd "$(dirname "$0")/.." || exit 1
OUT=${1:-benchmarks/results}
PY=${PYTHON:-python3}
BUDGET=${GPU_CHECK_BUDGET_S:-450}  # of the 8 minutes: the rest is start-up and the report
BENCH_ARGS=${BULKINFER_BENCH_ARGS:---workload mixed --num-requests 256 --dtype bfloat16 --compare bulkinfer}
START=$SECONDS
STATUS=0

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
unset TRITON_INTERPRET  # the kernels must compile for the GPU, not run in Triton's interpreter

mkdir -p "$OUT" || exit 1
: >"$OUT/gpu_check_steps.jsonl"

record() {  # record STEP RC SECONDS LOG NOTE: one JSON line for gpu_report.py (fields are ours: no quotes)
    printf '{"step": "%s", "rc": "%s", "seconds": %s, "log": "%s", "note": "%s"}\n' "$@" \
        >>"$OUT/gpu_check_steps.jsonl"
}

step() {  # step NAME LIMIT_S LOG -- COMMAND...: run under the smaller of LIMIT_S and the time left
    local name=$1 limit=$2 log=$3
    shift 4
    local left=$((BUDGET - (SECONDS - START)))
    ((limit > left)) && limit=$left
    if ((limit < 15)); then
        record "$name" skipped 0 "" "out of the time budget"
        return
    fi
    echo "== $name (at most ${limit}s)"
    local t0=$SECONDS
    timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$OUT/$log"
    local rc=${PIPESTATUS[0]}
    record "$name" "$rc" $((SECONDS - t0)) "$log" ""
    ((rc != 0)) && STATUS=1
}

# Preflight: a GPU, and bulkinfer importable with its kernels (an editable install needs no network).
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu_check: no CUDA device visible to $PY" >&2
    exit 1
fi
if ! "$PY" -c "import bulkinfer.kernels.paged_attention" 2>/dev/null; then
    "$PY" -m pip install -q --no-deps --no-build-isolation --no-index -e . || exit 1
fi

XDIST=()
"$PY" -c "import xdist" 2>/dev/null && XDIST=(-n 8)  # compiles the kernel variants in parallel
step "kernel tests (CUDA: fp32, fp16, bf16)" 210 gpu_check_tests.log -- \
    "$PY" -m pytest tests/kernels -q -p no:cacheprovider ${XDIST[@]+"${XDIST[@]}"}

step "kernel timings (bf16)" 150 gpu_check_kernels.log -- \
    "$PY" scripts/gpu_bench_kernels.py --out "$OUT" --dtype bfloat16

if "$PY" -m bulkinfer.cli bench --help >/dev/null 2>&1; then
    for model in random:0.5b random:1.5b; do
        # shellcheck disable=SC2086  # BENCH_ARGS is a list of words by design
        step "end-to-end bench $model" 100 "gpu_check_e2e_${model#random:}.log" -- \
            "$PY" -m bulkinfer.cli bench --model "$model" $BENCH_ARGS
    done
else
    record "end-to-end bench" skipped 0 "" "python -m bulkinfer.cli bench is not available in this checkout"
fi

"$PY" scripts/gpu_report.py --out "$OUT" || STATUS=1
echo "gpu_check: done in $((SECONDS - START)) s, status $STATUS; report in $OUT/gpu_check.md"
exit $STATUS
