"""Per backend, how much faster one host ran the same cells than another (issue 55's hardware table).

    .venv/bin/python studies/host-kinds/summarise.py OLD.json NEW.json

Reads the two files as ``batchperf compare --hardware`` does (:func:`batchperf.regress.hardware.compare_hardware`)
and prints, per backend, the cells both ran, the geometric mean of NEW's output throughput over OLD's and its range,
then each file's machine probes (the mean of a session's probes, every run's for a pooled baseline).
"""

from __future__ import annotations

import math
import statistics
import sys
from collections import defaultdict

from batchperf.regress.hardware import compare_hardware
from batchperf.regress.machine import session_probes
from batchperf.results.io import read_results
from batchperf.telemetry.probe import FIGURES


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    old, new = read_results(argv[0]), read_results(argv[1])
    backends = {rec.id: rec.backend for rec in new.records}
    by_backend: dict[str, list[float]] = defaultdict(list)
    for row in compare_hardware(old, new):
        if row.measured is not None:
            by_backend[backends[row.cell]].append(row.measured)
    print("| backend | cells | measured × (geometric mean) | range |")
    print("|---|--:|--:|--:|")
    for backend, ratios in sorted(by_backend.items()):
        mean = math.exp(statistics.fmean(math.log(r) for r in ratios))
        print(f"| {backend} | {len(ratios)} | {mean:.2f} | {min(ratios):.2f}–{max(ratios):.2f} |")
    every = [r for ratios in by_backend.values() for r in ratios]
    if every:
        print(f"| all | {len(every)} | {math.exp(statistics.fmean(math.log(r) for r in every)):.2f} | "
              f"{min(every):.2f}–{max(every):.2f} |")
    for label, file in (("OLD", old), ("NEW", new)):
        probes = session_probes(file)
        figures = "no probes" if probes is None else ", ".join(
            f"{FIGURES[n][0]} {v:.3g} {FIGURES[n][1]}" for n in FIGURES if (v := probes.figure(n)) is not None)
        print(f"{label} {file.path}: {len(probes.probes) if probes else 0} probes: {figures}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
