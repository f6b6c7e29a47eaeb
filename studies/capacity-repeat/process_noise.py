"""Where a capacity probe's noise is: processes of the capacity cell at one load, several rounds each, and each
process's reference; met per round (each round's requests judged against the workload's SLOs) and the reference
rate, into one small JSON (studies/capacity-repeat, "Where a probe's noise is").

    for i in 1 2 3 4 5 6; do OMP_NUM_THREADS=1 pytest perf_tests -m cpu --batchperf-backends=continuous \
        --batchperf-batch-sizes=4 --batchperf-prompt-lens=64 --batchperf-concurrency=64 \
        --batchperf-workloads=tenants:fixtures/traffic/sustained_tenants.toml --batchperf-rounds=5 \
        --batchperf-load=4.5,64 --benchmark-json=/tmp/drv/rounds-$i.json -p no:cacheprovider; done
    # and again with PYTHONHASHSEED=0, --batchperf-rounds=3, into /tmp/drv/hs0-$i.json
    PYTHONPATH=src python studies/capacity-repeat/process_noise.py \
        studies/capacity-repeat/data/f25m1-speed/process-noise.json
"""

from __future__ import annotations

import glob
import json
import sys

from batchperf.capacity.search import REFERENCE_LOAD
from batchperf.measure.metrics import SLO, SLO_FIELDS
from batchperf.measure.slo import attainment
from batchperf.results.io import read_results

SETS = (("hash-random", "/tmp/drv/rounds-*.json"), ("PYTHONHASHSEED=0", "/tmp/drv/hs0-*.json"))


def process(path: str) -> dict[str, object]:
    entry: dict[str, object] = {}
    for record in read_results(path, "process results").records:
        if record.load == REFERENCE_LOAD:
            entry["reference_rate"] = record.value("metrics.request_throughput")
            continue
        slos = {name: SLO(**{k: v for k, v in slo.items() if k in SLO_FIELDS})
                for name, slo in (record.raw("workload.slos", {}) or {}).items()}
        per_tenant = {name: int(block["offered"]) for name, block in record.tenants.items() if "offered" in block}
        entry["load"] = record.load
        entry["met_per_round"] = [attainment(trace, slos, per_tenant).met for trace in record.run_traces()]
        entry["offered_per_round"] = int(sum(per_tenant.values()))
    return entry


if __name__ == "__main__":
    kept = {label: [process(path) for path in sorted(glob.glob(pattern))] for label, pattern in SETS}
    with open(sys.argv[1], "w") as f:
        json.dump(kept, f, indent=1)
