#!/usr/bin/env bash
# The regression gate on a real cell, end to end (part of `make test`, after the CPU tier's CI slice):
# pin one cell of the slice's results as a baseline in a temporary folder, run that cell again with 10 ms
# slept after each forward pass (BATCHPERF_INJECT_DELAY_MS=10: about 3x its round's time on this tiny model,
# whose forward passes are a minority of a step's time), and require the gate to fail it as a regression
# confirmed by a re-measurement (about 20 s). No A/A
# check here: on a shared CI machine wall-clock numbers can swing past the CPU floors (docs/baselines.md).
#
#   bash ci/gate_check.sh [RESULTS]   # RESULTS: the slice's results (default results/ci-cpu.json)
set -euo pipefail
RESULTS="${1:-results/ci-cpu.json}"
BIN="${BIN:-.venv/bin}"
CELL="cpu-tiny-qwen2-hf-static-bs8-p64-c16"  # hf-static: the hook slows its model's forward (the continuous runner runs its own)
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

"$BIN/batchperf" refresh "$RESULTS" --baselines "$TMP/baselines" --cells "$CELL" --allow-dirty \
    --reason "ci/gate_check.sh: the gate's end-to-end check" > "$TMP/refresh.log" \
    || { cat "$TMP/refresh.log"; echo "gate check: could not pin $CELL from $RESULTS" >&2; exit 1; }
set +e
BATCHPERF_INJECT_DELAY_MS=10 "$BIN/pytest" perf_tests -m cpu -p no:cacheprovider -q -k "$CELL" \
    --batchperf-baselines "$TMP/baselines" --benchmark-compare --benchmark-json "$TMP/slow.json" > "$TMP/slow.log" 2>&1
code=$?
set -e
if [ "$code" -eq 1 ] && grep -q "REGRESSION (confirmed by a re-measurement)" "$TMP/slow.log"; then
    grep -m1 -A6 "batchperf gate: $CELL" "$TMP/slow.log" || true
    echo "gate check: a slowed $CELL was failed as a confirmed regression, as it must be"
else
    cat "$TMP/slow.log"
    echo "gate check: FAILED: a slowed $CELL was not failed as a confirmed regression (pytest exit $code)" >&2
    exit 1
fi
