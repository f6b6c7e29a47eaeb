#!/usr/bin/env bash
# Issue 55: a baseline of one dispatch-bound cell on a quiet machine, then the same cell beside two busy loops:
# the gate's regression verdict must name the machine's own slowdown.
set -uo pipefail
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}  # as the CPU tier runs (the Makefile); the first model 17 run had 2
B=.venv/bin; T=${1:-/tmp/busy}; rm -rf "$T"; mkdir -p "$T"
CELL=cpu-tiny-qwen2-hf-static-bs1-p64-c4
$B/pytest perf_tests -m cpu -p no:cacheprovider -q -k "$CELL" --benchmark-json "$T/base.json" > "$T/base.log" 2>&1
$B/batchperf refresh "$T/base.json" --baselines "$T/baselines" --cells "$CELL" --allow-dirty --reason "busy-loop demo" > "$T/refresh.log" 2>&1 || { cat "$T/refresh.log"; exit 1; }
for i in 1 2; do (exec timeout 900 python3 -c 'while True: pass') & done
$B/pytest perf_tests -m cpu -p no:cacheprovider -q -k "$CELL" --batchperf-baselines "$T/baselines" --benchmark-compare --benchmark-json "$T/busy.json" > "$T/busy.log" 2>&1
echo "pytest exit $?"
kill $(jobs -p) 2>/dev/null
grep -A10 "batchperf gate" "$T/busy.log" | head -30
