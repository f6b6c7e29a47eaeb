"""Issue 57's searches (adaptive placement, the fit over every probe): each search's figures, the spread the quiet
ones show against the spread each stated, and what that spread says of the between-search floor.

    PYTHONPATH=src python studies/capacity-repeat/issue57.py                  # the table in README.md
    PYTHONPATH=src python studies/capacity-repeat/issue57.py --probes DIR...  # also keep each search's probes
                                                                             # (load, met, offered) in data/
    PYTHONPATH=src python studies/capacity-repeat/issue57.py --restate   # records written again by today's code
                                                                         # from their probes: data/restated/
    PYTHONPATH=src python studies/capacity-repeat/issue57.py --data studies/capacity-repeat/data/f25m1  # another host
    PYTHONPATH=src python studies/capacity-repeat/issue57.py --data studies/capacity-repeat/data/f25m1-speed \
        --probes /tmp/s57/issue57-*-probes                        # the speed effect's searches, their probes kept

Reads ``data/issue57-<name>.json`` (each search's capacity record as written). ``--probes`` takes the searches'
``<out>-probes`` folders (the probes' own results files, ~300 KB each, are not kept) and writes
``issue57-probes.json`` in the ``--data`` folder: every probe's load, requests met and offered, offered rate and
reference rate.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
from pathlib import Path

from batchperf.capacity.probe import kept_probes, read_probe
from batchperf.capacity.search import (
    RELATIVE_FLOOR,
    Capacity,
    ProbeResult,
    SearchSettings,
    fit_runs,
)
from batchperf.results.io import read_results

DATA = Path(__file__).parent / "data"
WRITTEN_RELATIVE_FLOOR = 0.041  # search.RELATIVE_FLOOR when the searches of 2026-12-07 ran
FIELDS = ("max_load", "interval_low", "interval_high", "max_request_rate", "relative_capacity", "reference_rate",
          "spread", "relative_spread", "dispersion", "slope", "speed_effect", "probes", "search_s", "stopped")


def probes(folder: Path) -> list[dict[str, float]]:
    """Every probe of a search's probes folder: its load, met, offered, offered rate and reference rate."""
    out = []
    for load, path in kept_probes(folder):
        got = read_probe(path, load)
        out.append({"load": load, "met": got.met, "offered": got.offered, "request_rate": got.request_rate,
                    "reference_rate": got.reference_rate})
    return out


def searches(data: Path = DATA) -> dict[str, dict[str, object]]:
    out = {}
    for path in sorted(data.glob("issue57-*.json")):
        name = path.stem.removeprefix("issue57-")
        if name == "probes":
            continue
        cap = read_results(path).records[0].capacity
        out[name] = {k: cap.get(k) for k in FIELDS}
    return out


def restate(data: Path, name: str, kept: dict[str, list[dict[str, float]]]) -> Path:
    """The search's record with its ``capacity`` section written again by today's code from the same probes (the
    fit with its speed effect, the rate at the capacity, the floors): what today's ``batchperf capacity`` writes
    from those probes, as the probes' placement depends only on the fit. Into ``<data>/restated/``."""
    raw = json.loads((data / f"issue57-{name}.json").read_text())
    cap = raw["benchmarks"][0]["extra_info"]["capacity"]
    settings = SearchSettings(target=cap["target_attainment"], resolution=cap["resolution"],
                              confidence=cap["confidence"])
    runs = tuple((p["load"], ProbeResult(p["met"], p["offered"], p["request_rate"], p["reference_rate"]))
                 for p in kept[name])
    fitted = fit_runs(runs, settings)
    capacity = Capacity(settings, runs, fitted, cap["stopped"], cap["search_s"])
    raw["benchmarks"][0]["extra_info"]["capacity"] = capacity.section()
    raw["benchmarks"][0]["extra_info"].pop("traces", None)  # the probe's raw requests stay in the record as written
    out = data / "restated" / f"issue57-{name}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(raw, indent=1) + "\n")
    return out


def spread_of(values: list[float]) -> float:
    """The sd of the logs: a relative sd, as the stated spreads are."""
    return statistics.stdev(math.log(v) for v in values)


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    args.add_argument("--probes", type=Path, nargs="*", default=[], help="the searches' probes folders to keep")
    args.add_argument("--restate", action="store_true", help="write each search's record again from its probes "
                      "with today's code into DIR/restated/ (for batchperf compare; the table then reads those)")
    args.add_argument("--data", type=Path, default=DATA, metavar="DIR", help="the searches' records (default: data/, "
                      "the family 25 model 17 host's; data/f25m1/: the family 25 model 1 host's)")
    opts = args.parse_args()
    if opts.probes:
        kept = {folder.name.removesuffix("-probes").removeprefix("issue57-"): probes(folder) for folder in opts.probes}
        target = opts.data / "issue57-probes.json"
        old = json.loads(target.read_text()) if target.exists() else {}
        target.write_text(json.dumps({**old, **kept}, indent=1) + "\n")
    if opts.restate:
        kept = json.loads((opts.data / "issue57-probes.json").read_text())
        for name in searches(opts.data):
            print(f"restated: {restate(opts.data, name, kept)}" if name in kept else f"not restated: {name} (its "
                  "probes were not kept)")
    rows = searches(opts.data / "restated" if opts.restate else opts.data)
    print("| search | capacity (x load) | 90% interval (width) | req/s offered | relative capacity | reference req/s "
          "| stated spread abs / rel | dispersion | speed effect | probes, s, stopped by |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for name, r in rows.items():
        width = (r["interval_high"] - r["interval_low"]) / r["max_load"]
        speed = "-" if r["speed_effect"] is None else f"{r['speed_effect']:.1f}"
        print(f"| {name} | {r['max_load']:.3f} | {r['interval_low']:.3f}-{r['interval_high']:.3f} ({width:.1%}) "
              f"| {r['max_request_rate']:.2f} | {r['relative_capacity']:.3f} | {r['reference_rate']:.1f} "
              f"| ±{r['spread']:.1%} / ±{r['relative_spread']:.1%} | {r['dispersion']:.1f} | {speed} "
              f"| {r['probes']}, {r['search_s']:.0f}, {r['stopped']} |")
    quiet = {n: r for n, r in rows.items() if n.startswith("quiet")}
    if len(quiet) < 2:
        return
    caps = [r["max_load"] for r in quiet.values()]
    sd, rel_sd = spread_of(caps), spread_of([r["relative_capacity"] for r in quiet.values()])
    stated = [r["spread"] for r in quiet.values()]
    # the fit's own sd, read from its interval as Fit.sd does; the floor is what the searches show beyond it
    z = statistics.NormalDist().inv_cdf(0.95)
    fit_sds = [math.log(r["interval_high"] / r["interval_low"]) / (2 * z) for r in quiet.values()]
    fit_var = statistics.fmean(s ** 2 for s in fit_sds)
    print(f"\n{len(quiet)} quiet searches: mean {statistics.fmean(caps):.3f}, sd {sd:.1%} (range "
          f"{(max(caps) - min(caps)) / statistics.fmean(caps):.1%}), relative capacity sd {rel_sd:.1%}; "
          f"stated spreads ±{min(stated):.1%} to ±{max(stated):.1%}; the fits' own sds {min(fit_sds):.1%} to "
          f"{max(fit_sds):.1%} (rms {math.sqrt(fit_var):.1%}); the floor they leave, sqrt(max(0, sd^2 - rms^2)): "
          f"{math.sqrt(max(0.0, sd ** 2 - fit_var)):.1%}")
    # the relative capacity's own terms (fit and pooled reference) are its stated spread less the floor it was
    # stated with (search.RELATIVE_FLOOR when they ran: 4.1% for data/'s, 0 since)
    written = WRITTEN_RELATIVE_FLOOR if opts.data.resolve() == DATA.resolve() and not opts.restate else RELATIVE_FLOOR
    inner = [max(0.0, r["relative_spread"] ** 2 - written ** 2) for r in quiet.values()]
    print(f"relative capacity: its own terms' rms {math.sqrt(statistics.fmean(inner)):.1%}; the floor they leave "
          f"{math.sqrt(max(0.0, rel_sd ** 2 - statistics.fmean(inner))):.1%}")
    mean = statistics.fmean(math.log(c) for c in caps)
    for n, r in quiet.items():
        print(f"  {n}: {math.log(r['max_load']) - mean:+.1%} from the mean of logs, "
              f"{(math.log(r['max_load']) - mean) / r['spread']:+.2f} of its stated spread")
    print("pairs, ln(b/a) / sqrt(sa^2 + sb^2):")
    for (na, a), (nb, b) in itertools.combinations(quiet.items(), 2):
        d = math.log(b["max_load"] / a["max_load"])
        print(f"  {na} -> {nb}: {d:+.1%}, z {d / math.hypot(a['spread'], b['spread']):+.2f}")


if __name__ == "__main__":
    main()
