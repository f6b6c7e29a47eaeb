#!/usr/bin/env bash
# Six `batchperf capacity` searches in a row with docs/traffic.md's command (issue 41), each into data/run-N.json,
# its probes in data/run-N-probes/ (summarised by summarise.py, not kept), the 1-minute load average sampled every
# 15 s into data/load-N.txt. Run from the repository root: studies/capacity-repeat/run.sh [FIRST [LAST]]
set -u
data=studies/capacity-repeat/data
mkdir -p "$data"
for n in $(seq "${1:-1}" "${2:-6}"); do
    ( while true; do echo "$(date -u +%s) $(cut -d' ' -f1 /proc/loadavg)"; sleep 15; done ) > "$data/load-$n.txt" &
    sampler=$!
    began=$(date -u +%s)
    OMP_NUM_THREADS=1 batchperf capacity --tier cpu --batchperf-backends continuous --batchperf-batch-sizes 4 \
        --batchperf-prompt-lens 64 --batchperf-concurrency 64 \
        --batchperf-workloads tenants:fixtures/traffic/sustained_tenants.toml --batchperf-rounds 1 \
        --target 0.9 --resolution 0.05 --start 8 --budget-min 10 --out "$data/run-$n.json"
    echo "search $n: exit $? in $(( $(date -u +%s) - began )) s"
    kill "$sampler"
done
