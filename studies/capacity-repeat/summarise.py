"""Summarise the six capacity searches of studies/capacity-repeat (issue 41): each search's figures, its probes
(load, attainment, offered and reference rates; the probes' own results files are not kept), the load average,
and the spread the six show against the spread each one stated.

    PYTHONPATH=src python studies/capacity-repeat/summarise.py     # writes data/summary.json, prints the table
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from batchperf.capacity.record import probe_records, probe_result, reference_rate
from batchperf.capacity.search import REFERENCE_LOAD
from batchperf.results.io import read_results

DATA = Path(__file__).parent / "data"


def probes(folder: Path) -> list[dict[str, object]]:
    out = []
    for path in sorted(folder.glob("probe[0-9][0-9]-load*.json")):
        results = read_results(path, "probe results")
        loads = {r.load for r in results.records}
        load = min(loads - {REFERENCE_LOAD}) if loads - {REFERENCE_LOAD} else REFERENCE_LOAD
        probe, reference = probe_records(results, load)
        got = probe_result(probe, reference_rate(reference))
        out.append({"file": path.name, "load": load, "met": got.met, "offered": got.offered,
                    "request_rate": got.request_rate, "reference_rate": got.reference_rate})
    return out


def load_average(path: Path) -> dict[str, float]:
    values = [float(line.split()[1]) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values)} if values else {}


def main() -> None:
    rows = []
    for path in sorted(DATA.glob("run-*.json"), key=lambda p: int(p.stem.split("-")[1])):
        n = int(path.stem.split("-")[1])
        cap = read_results(path).records[0].capacity
        folder = DATA / f"run-{n}-probes"
        rows.append({"search": n, **{k: cap.get(k) for k in (
            "max_load", "bracket_high", "max_request_rate", "relative_capacity", "reference_rate", "reference_drift",
            "binomial_spread", "spread", "relative_spread", "probes", "search_s", "converged", "dispersion",
            "attainment_at_max_load", "requests_at_max_load")},
            "load_average": load_average(DATA / f"load-{n}.txt"),
            "probe_runs": probes(folder) if folder.is_dir() else []})
    summary: dict[str, object] = {"searches": rows}
    for key in ("max_load", "max_request_rate", "relative_capacity"):
        values = [r[key] for r in rows if isinstance(r[key], (int, float))]
        if len(values) >= 2:
            mean = statistics.fmean(values)
            summary[f"{key}_between_searches"] = {
                "mean": mean, "sd_share": statistics.stdev(values) / mean,
                "range_share": (max(values) - min(values)) / min(values)}
    (DATA / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print("| search | capacity [bracket] | req/s | relative capacity | reference req/s, drift | stated spread abs / rel "
          "| probes, min | load average |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        la = r["load_average"]
        f = {k: (v if isinstance(v, (int, float)) else math.nan) for k, v in r.items()}
        print(f"| {r['search']} | {f['max_load']:g} [{f['max_load']:g}, {f['bracket_high']:g}]"
              f"{'' if r['converged'] else ' NOT converged'} | {f['max_request_rate']:.3g} | "
              f"{f['relative_capacity']:.3f} | {f['reference_rate']:.3g}, ±{f['reference_drift']:.1%} | "
              f"±{f['spread']:.1%} / ±{f['relative_spread']:.1%} | {r['probes']}, {f['search_s'] / 60:.1f} | "
              f"{la.get('mean', math.nan):.2f} ({la.get('min', math.nan):.2f}–{la.get('max', math.nan):.2f}) |")
    for key in ("max_load", "max_request_rate", "relative_capacity"):
        if (b := summary.get(f"{key}_between_searches")) is not None:
            print(f"{key}: mean {b['mean']:.4g}, sd {b['sd_share']:.1%} of it, range {b['range_share']:.1%}")


if __name__ == "__main__":
    main()
