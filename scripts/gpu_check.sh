#!/usr/bin/env bash
# Device check for bulkinfer's GPU path, on a CUDA machine with no network, in two stages of at
# most 4 minutes each (start-up included):
#   stage 1, correctness:
#     - the kernel tests (tests/kernels) compiled for the GPU, in fp32, fp16 and bf16;
#     - scripts/gpu_stage1.py on a 0.5B Llama with random weights, bf16: greedy through Triton
#       against the torch reference path (prompt logprobs within bf16 tolerance), CUDA graphs on
#       and off (identical in deterministic mode), deterministic mode alone vs batched, bitwise;
#   stage 2, speed:
#     - `bulkinfer bench` on random 0.5B, 1.5B and 8B Llama shapes, bf16, 1,000 requests, each
#       with the decode step against the bandwidth floor (target: within 1.5x at batch 256);
#     - transformers' continuous batching on the 1.5B shape beside it (target: bulkinfer 10x);
#     - each kernel timed against its reference (scripts/gpu_bench_kernels.py), if time is left;
#   then gpu_check.json and gpu_check.md (scripts/gpu_report.py) from whatever the steps left.
#
# Usage: scripts/gpu_check.sh [--stage 1|2|all] [OUT_DIR]      (default: all, benchmarks/results)
# Environment: PYTHON (default python3); GPU_CHECK_STAGE_S (default 225 s of steps per stage: the
#   rest of the 4 minutes is start-up and the report).
# Exit status: 0 every step that ran passed, 1 a step failed or timed out, 2 usage.

set -uo pipefail

usage() {
    echo "usage: scripts/gpu_check.sh [--stage 1|2|all] [OUT_DIR]" >&2
    exit 2
}
STAGE=all
if [[ ${1:-} == --stage ]]; then
    [[ ${2:-} =~ ^(1|2|all)$ ]] || usage
    STAGE=$2
    shift 2
fi
[[ $# -gt 1 || ${1:-} == -* ]] && usage
cd "$(dirname "$0")/.." || exit 1
OUT=${1:-benchmarks/results}
PY=${PYTHON:-python3}
BUDGET=${GPU_CHECK_STAGE_S:-225}
START=$SECONDS
STATUS=0

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
unset TRITON_INTERPRET  # the kernels must compile for the GPU, not run in Triton's interpreter

mkdir -p "$OUT" || exit 1
[[ $STAGE == 2 ]] || : >"$OUT/gpu_check_steps.jsonl"  # stage 2 alone adds to stage 1's record

record() {  # record STEP RC SECONDS LOG NOTE: one JSON line for gpu_report.py (fields are ours: no quotes)
    printf '{"step": "%s", "rc": "%s", "seconds": %s, "log": "%s", "note": "%s"}\n' "$@" \
        >>"$OUT/gpu_check_steps.jsonl"
}

stage_start() {  # each stage has its own budget, counted from here
    START=$SECONDS
    echo "== stage $1"
}

step() {  # step NAME LIMIT_S LOG -- COMMAND...: run under the smaller of LIMIT_S and the stage's time left
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

if [[ $STAGE != 2 ]]; then
    stage_start 1
    # The compile check needs no GPU (CI runs it); here the kernels run.
    step "kernel tests (CUDA: fp32, fp16, bf16)" 90 gpu_check_tests.log -- \
        "$PY" -m pytest tests/kernels -q -p no:cacheprovider -m "not slow" \
        --ignore=tests/kernels/test_compile_check.py ${XDIST[@]+"${XDIST[@]}"}
    step "engine on CUDA: parity, graphs, deterministic (0.5B, bf16)" 135 gpu_check_stage1.log -- \
        "$PY" scripts/gpu_stage1.py --out "$OUT"
fi

if [[ $STAGE != 1 ]]; then
    stage_start 2
    BENCH=(-m bulkinfer bench --dtype bfloat16 --workload mixed --num-requests 1000)
    for model_limit in 0.5b:40 1.5b:50 8b:90; do  # the 8B's limit includes writing its 16 GB checkpoint
        model=${model_limit%:*}
        step "bench random:$model, 1000 requests" "${model_limit#*:}" "gpu_check_bench_$model.log" -- \
            "$PY" "${BENCH[@]}" --model "random:$model" --compare bulkinfer --output "$OUT/gpu_bench_$model.json"
    done
    # transformers' continuous batching is far slower: fewer requests, compared by tokens per second.
    step "transformers continuous batching, random:1.5b, 256 requests" 45 gpu_check_bench_hf.log -- \
        "$PY" -m bulkinfer bench --dtype bfloat16 --workload mixed --num-requests 256 --model random:1.5b \
        --compare continuous --output "$OUT/gpu_bench_hf_1.5b.json"
    step "kernel timings (bf16)" 60 gpu_check_kernels.log -- \
        "$PY" scripts/gpu_bench_kernels.py --out "$OUT" --dtype bfloat16
fi

"$PY" scripts/gpu_report.py --out "$OUT" || STATUS=1
echo "gpu_check: done in $((SECONDS - START)) s, status $STATUS; report in $OUT/gpu_check.md"
exit $STATUS
