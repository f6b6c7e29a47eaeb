#!/usr/bin/env bash
# The prepared device check: a slice of the GPU tier on Qwen2.5-0.5B with dummy weights (nothing downloaded), an A/A
# (two of its cells again, in a fresh process), an injected 5% A/B (the same cells, each forward pass 5% slower,
# BATCHPERF_INJECT_SLOWDOWN=0.05), the HTML report and a one-screen summary with the measured floors.
#
#   ci/gpu_check.sh --out gpu-check/                 # on a GPU machine: budget 8 minutes on one GPU (not yet run on one)
#   ci/gpu_check.sh --device cpu --out /tmp/check    # a shrunken slice on the CPU: what CI runs (tests/report/test_gpu_check.py)
#
# Needs only what a stock CUDA + PyTorch image has (torch, transformers, pytest, pytest-benchmark, hypothesis,
# nvidia-ml-py, psutil, rich, matplotlib) and no network; installs nothing: this checkout runs from PYTHONPATH=src
# with its pytest plugins named (-p), no entry points. vLLM is not needed (its cells are not in the slice).
# Options: --device cuda|cpu (default cuda), --python PY (default $BATCHPERF_PYTHON, else python3),
# -- ARGS (more pytest arguments for every run).
# Writes into --out: gpu-health.json, results.json, aa.json, ab.json, report/index.html, summary.txt, pytest.log,
# aa.log, ab.log. Exit status: non-zero when a step failed (a cell, the A/A or A/B run, the report or the summary).
set -euo pipefail
cd "$(dirname "$0")/.."

device=cuda out="" python="${BATCHPERF_PYTHON:-python3}" extra=()
usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
while (($#)); do
    case "$1" in
        --device) device="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --python) python="$2"; shift 2 ;;
        --) shift; extra=("$@"); break ;;
        -h|--help) usage 0 ;;
        *) echo "ci/gpu_check.sh: unknown argument '$1'" >&2; usage ;;
    esac
done
[[ "$device" == cuda || "$device" == cpu ]] || { echo "ci/gpu_check.sh: --device must be cuda or cpu, not '$device'" >&2; exit 2; }
[[ -n "$out" ]] || { echo "ci/gpu_check.sh: --out DIR is required" >&2; usage; }
mkdir -p "$out"
out="$(cd "$out" && pwd)"

# this checkout, no installed entry points, and no hub: every model is built from its shipped config
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1

if [[ "$device" == cuda ]] && ! "$python" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then
    echo "ci/gpu_check.sh: --device cuda, but torch sees no CUDA device here; run it on a GPU machine, or --device cpu" >&2
    exit 2
fi

# The slice. On a GPU: hf-static and continuous, batch 1/8/32, prompts 128 and 2048, 64 requests in flight;
# the A/A and A/B cells are the batch-8, prompt-128 cell of each backend. On the CPU: the same code path, shrunk.
slice=(--batchperf-models qwen2.5-0.5b --batchperf-backends hf-static,continuous --batchperf-concurrency 64)
if [[ "$device" == cuda ]]; then
    slice+=(--batchperf-batch-sizes 1,8,32 --batchperf-prompt-lens 128,2048 --batchperf-num-prompts 32 --batchperf-rounds 2)
    aa=(--batchperf-batch-sizes 8 --batchperf-prompt-lens 128)
else
    slice+=(--batchperf-batch-sizes 2 --batchperf-prompt-lens 8 --batchperf-num-prompts 2 --batchperf-rounds 1
            --batchperf-output-lens 2,3)
    aa=()
fi

started=$SECONDS
step() { echo; echo "=== gpu-check [$((SECONDS - started)) s]: $*"; }
cells() {  # cells JSON LOG ARGS...: the GPU tier's cells on $device, narrowed by ARGS
    local json="$1" log="$2"
    shift 2
    "$python" -m pytest perf_tests -m gpu -p no:cacheprovider -p batchperf.suite.plugin -p pytest_benchmark.plugin \
        --batchperf-device "$device" "${slice[@]}" "$@" "--benchmark-json=$json" "${extra[@]}" 2>&1 | tee "$log"
    return "${PIPESTATUS[0]}"
}

status=0
step "GPU health"
"$python" -m batchperf.cli gpu-health --out "$out/gpu-health.json" || status=1

step "the slice: pytest perf_tests -m gpu --batchperf-device $device ${slice[*]}"
cells "$out/results.json" "$out/pytest.log" || status=1

step "A/A: the same cells again, in a fresh process"
cells "$out/aa.json" "$out/aa.log" "${aa[@]}" || status=1

step "A/B: the same cells, each forward pass 5% slower (BATCHPERF_INJECT_SLOWDOWN=0.05), in a fresh process"
BATCHPERF_INJECT_SLOWDOWN=0.05 cells "$out/ab.json" "$out/ab.log" "${aa[@]}" || status=1

step "report"
"$python" -m batchperf.cli report "$out/results.json" --out "$out/report" || status=1

step "summary"
"$python" -m batchperf.report.gpu_check "$out/results.json" "$out/aa.json" --ab "$out/ab.json" \
    --out "$out/summary.txt" || status=1

echo
echo "gpu-check: $((SECONDS - started)) s, artifacts in $out (exit $status)"
if [[ "$device" == cuda ]] && ((SECONDS - started > 480)); then
    echo "gpu-check: over its 8-minute budget: shrink the slice (--batchperf-num-prompts, --batchperf-rounds) before CI runs it" >&2
fi
exit "$status"
