"""Refit the six searches of studies/capacity-repeat with issue 57's estimator: every probe's requests (kept in
data/summary.json) through batchperf.capacity.fit, and the spread between the six of the fitted capacity, of its
request rate and of its relative capacity with the reference pooled over each search, against the bracket's.

    PYTHONPATH=src python studies/capacity-repeat/refit.py      # prints the table in README.md, "Refitted"

The searches placed their probes by bisection (issue 41's search): this shows what the estimator does with their
data, not what the adaptive placement does (that needs six new searches on a quiet machine).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from batchperf.capacity.fit import fit, outcomes_of
from batchperf.capacity.search import SearchSettings

DATA = Path(__file__).parent / "data"


def cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.fmean(values)


def main() -> None:
    s = SearchSettings()
    rows = []
    for search in json.loads((DATA / "summary.json").read_text())["searches"]:
        runs = search["probe_runs"]
        got = fit(outcomes_of([(p["load"], p["met"], p["offered"]) for p in runs]), s.target, s.confidence,
                  (s.min_load, s.max_load))
        # the offered rate per unit of load (summary.json's rates are offered / duration: the drain counted)
        per_load = statistics.median(p["request_rate"] / p["load"] for p in runs)
        reference = statistics.fmean(p["reference_rate"] for p in runs)
        refs_error = statistics.stdev(p["reference_rate"] for p in runs) / len(runs) ** 0.5 / reference
        rows.append({"search": search["search"], "bracket": search["max_load"], "capacity": got.capacity,
                     "low": got.low, "high": got.high, "sd": got.sd, "dispersion": got.dispersion,
                     "slope": got.slope, "rate": got.capacity * per_load, "reference": reference,
                     "reference_error": refs_error, "relative": got.capacity * per_load / reference,
                     "old_relative": search["relative_capacity"], "probes": len(runs)})
    print("| search | bracket's low end | fitted capacity [90% interval] | fit's sd | dispersion | slope | req/s | "
          "pooled reference req/s (its error) | relative (issue 41's) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['search']} | {r['bracket']:.4g} | {r['capacity']:.3f} [{r['low']:.3f}, {r['high']:.3f}] | "
              f"±{r['sd']:.1%} | {r['dispersion']:.1f} | {r['slope']:.2f} | {r['rate']:.2f} | "
              f"{r['reference']:.1f} (±{r['reference_error']:.1%}) | {r['relative']:.3f} ({r['old_relative']:.3f}) |")
    for name, key in (("bracket's low end", "bracket"), ("fitted capacity", "capacity"), ("its request rate", "rate"),
                      ("relative, pooled reference", "relative"), ("relative, issue 41's", "old_relative")):
        values = [r[key] for r in rows]
        print(f"between the six, {name}: mean {statistics.fmean(values):.4g}, sd {cv(values):.1%}, "
              f"range {(max(values) - min(values)) / statistics.fmean(values):.0%}")


if __name__ == "__main__":
    main()
