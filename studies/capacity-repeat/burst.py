"""Where a capacity record's misses arrive: the probe a capacity record keeps (the one nearest the capacity) judged
request by request, each miss by its arrival, and the shortest arrival window that holds all but one of them.

    PYTHONPATH=src python studies/capacity-repeat/burst.py studies/capacity-repeat/data/f25m1-speed/issue57-*.json

With sustained_tenants.toml (60 requests) the misses of every search's nearest probe fall in one burst of arrivals
(studies/capacity-repeat, "One burst decides a probe").
"""

from __future__ import annotations

import sys

from batchperf.measure.metrics import SLO, SLO_FIELDS
from batchperf.measure.slo import meets
from batchperf.results.io import read_results


def misses(path: str) -> tuple[float, int, list[float], float]:
    """The probe's load, its requests, the arrival (s) of each request that missed its SLO, and the arrival span."""
    record = read_results(path).records[0]
    slos = {name: SLO(**{k: v for k, v in slo.items() if k in SLO_FIELDS})
            for name, slo in (record.raw("workload.slos", {}) or {}).items()}
    trace = record.run_traces()[0]
    missed = []
    for request in trace.requests:
        if not meets(request, slos.get(request.tenant or "")):
            missed.append(request.arrival)
    arrivals = [r.arrival for r in trace.requests]
    return record.raw("workload.load", 0.0), len(arrivals), sorted(missed), max(arrivals) - min(arrivals)


def window(times: list[float], keep: int) -> float:
    """The shortest span holding ``keep`` of ``times`` (sorted)."""
    if keep <= 1:
        return 0.0
    return min(b - a for a, b in zip(times, times[keep - 1:]))


if __name__ == "__main__":
    print("| record | load | requests | misses | arrival span, s | shortest window holding all misses but one, s |")
    print("|---|--:|--:|--:|--:|--:|")
    for path in sys.argv[1:]:
        load, n, missed, span = misses(path)
        print(f"| {path.rsplit('/', 1)[-1]} | {load:g} | {n} | {len(missed)} | {span:.2f} | "
              f"{window(missed, len(missed) - 1):.2f} ({window(missed, len(missed) - 1) / span:.0%} of the span) |")
