"""Would another speed figure take the machine out of the capacity? The model 1 searches of 2026-12-07
(data/f25m1-speed) refitted with each probe's speed read another way, and their capacities divided by their
searches' mean machine figures (studies/capacity-repeat, "Other speed figures").

    PYTHONPATH=src python studies/capacity-repeat/speed_covariates.py
    PYTHONPATH=src python studies/capacity-repeat/speed_covariates.py --collect /tmp/s57/issue57-*-probes  # wrote
                                                                       # data/f25m1-speed/in-run-speed.json

- ``ref``: the saturated reference round after the probe's run, in its process (the fit's speed effect today);
- ``itl`` / ``itl_mean``: 1 / the median (mean) inter-token latency of the probe's own run, its engine's speed while
  it served those requests (data/f25m1-speed/in-run-speed.json, read from the probes' traces);
- ``none``: no speed effect;
- each search's capacity ÷ its probes' mean machine figure (the pytest's machine probe at its start and end:
  data/f25m1-speed/machine-per-probe.json): the interpreter, GEMM, memory copy, and the reference itself.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

from batchperf.capacity.probe import kept_probes, read_probe
from batchperf.capacity.record import probe_records
from batchperf.capacity.search import ProbeResult, SearchSettings, fit_runs
from batchperf.results.io import read_results

DATA = Path(__file__).parent / "data" / "f25m1-speed"
SETTINGS = SearchSettings(target=0.9, resolution=0.05, start=8.0)  # the docs' command
MACHINE = ("interp_mops", "gemm_gflops", "copy_gbps", "reference_rate")


def collect(folders: list[str]) -> None:
    """Each probe's load, met, offered, reference and in-run speed (1 / its inter-token latencies' median and mean)
    from the searches' probes folders, into data/f25m1-speed/in-run-speed.json."""
    out = {}
    for folder in folders:
        name = Path(folder).name.removeprefix("issue57-").removesuffix("-probes")
        rows = []
        for load, path in kept_probes(Path(folder)):
            got = read_probe(path, load)
            probe, _ = probe_records(read_results(path, "probe results"), load)
            gaps = [b - a for request in probe.run_traces()[0].requests
                    for a, b in zip(request.token_times, request.token_times[1:])]
            rows.append({"load": load, "met": got.met, "offered": got.offered, "ref": got.reference_rate,
                         "itl": 1 / statistics.median(gaps), "itl_mean": 1 / statistics.fmean(gaps)})
        out[name] = rows
    (DATA / "in-run-speed.json").write_text(json.dumps(out, indent=0))


def capacities(probes: dict[str, list[dict]], speed: str) -> dict[str, tuple[float, float, float, float]]:
    """Each search's capacity, its fit's sd, speed effect and dispersion with ``speed`` as each probe's speed."""
    out = {}
    for name, rows in probes.items():
        runs = [(r["load"], ProbeResult(r["met"], r["offered"], 0.0, None if speed == "none" else r[speed]))
                for r in rows]
        f = fit_runs(runs, SETTINGS)
        out[name] = (f.capacity, f.sd, f.speed_effect or 0.0, f.dispersion)
    return out


def logs_sd(values: list[float]) -> float:
    return statistics.stdev(math.log(v) for v in values)


def main() -> None:
    in_run = json.loads((DATA / "in-run-speed.json").read_text())
    machine = json.loads((DATA / "machine-per-probe.json").read_text())
    print("| speed figure | quiet capacities' sd | fits' sd | dispersion | speed effect c | slowed 10%, 5% vs quiet |")
    print("|---|--:|--:|--:|--:|--:|")
    for speed in ("ref", "itl", "itl_mean", "none"):
        caps = capacities(in_run, speed)
        quiet = [n for n in caps if n.startswith("quiet")]
        mean = statistics.fmean(math.log(caps[n][0]) for n in quiet)
        slowed = ", ".join(f"{math.log(caps[n][0]) - mean:+.1%}" for n in ("slowed-10", "slowed-5"))
        print(f"| {speed} | {logs_sd([caps[n][0] for n in quiet]):.1%} | {min(caps[n][1] for n in quiet):.1%}-"
              f"{max(caps[n][1] for n in quiet):.1%} | {min(caps[n][3] for n in quiet):.1f}-"
              f"{max(caps[n][3] for n in quiet):.1f} | {min(caps[n][2] for n in quiet):.1f} to "
              f"{max(caps[n][2] for n in quiet):.1f} | {slowed} |")
    caps = capacities(in_run, "ref")
    quiet = [n for n in caps if n.startswith("quiet")]
    print("\n| capacity ÷ the search's mean | quiet sd | the searches' means | slowed 10%, 5% vs quiet |")
    print("|---|--:|---|--:|")
    for figure in MACHINE:
        means = {n: statistics.fmean(p[figure] for p in machine[n] if p.get(figure)) for n in caps}
        norm = {n: caps[n][0] / means[n] for n in caps}
        mean = statistics.fmean(math.log(norm[n]) for n in quiet)
        slowed = ", ".join(f"{math.log(norm[n]) - mean:+.1%}" for n in ("slowed-10", "slowed-5"))
        print(f"| {figure} | {logs_sd([norm[n] for n in quiet]):.1%} | "
              f"{', '.join(f'{means[n]:.1f}' for n in caps)} | {slowed} |")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--collect"]:
        collect(sys.argv[2:])
    main()
