"""Each capacity probe beside the machine probes its pytest took (start and end, their mean): its load, requests met
and offered, reference rate, GEMM, memory copy and interpreter figures, and its CPU wait share; per search, the
correlation of the probes' reference rates with each (studies/capacity-repeat, "The speed effect").

    PYTHONPATH=src python studies/capacity-repeat/machine_per_probe.py '/tmp/s57/issue57-*-probes' \
        studies/capacity-repeat/data/f25m1-speed/machine-per-probe.json

The probes folders (~300 KB a probe) are not kept; their figures are, in the output file.
"""

from __future__ import annotations

import glob
import json
import math
import statistics
import sys

from batchperf.capacity.record import probe_records, probe_result, reference_rate
from batchperf.capacity.search import REFERENCE_LOAD
from batchperf.regress.machine import session_probes
from batchperf.results.io import read_results

FIGURES = ("gemm_gflops", "copy_gbps", "interp_mops")


def row(path: str) -> dict[str, float | None]:
    results = read_results(path, "probe results")
    load = min({r.load for r in results.records} - {REFERENCE_LOAD})
    probe, reference = probe_records(results, load)
    got = probe_result(probe, reference_rate(reference))
    probes = session_probes(results)
    figures = {name: probes.figure(name) for name in FIGURES} if probes else {}
    return {"load": load, "met": got.met, "offered": got.offered, "reference_rate": got.reference_rate,
            "wait": probe.value("telemetry.cpu_wait_share"),
            "ref_wait": reference.value("telemetry.cpu_wait_share") if reference else None, **figures}


def main(pattern: str, out: str) -> None:
    kept = {}
    for folder in sorted(glob.glob(pattern)):
        name = folder.rstrip("/").split("/")[-1].removeprefix("issue57-").removesuffix("-probes")
        kept[name] = [row(path) for path in sorted(glob.glob(folder + "/probe[0-9][0-9]-load*.json"))]
    with open(out, "w") as f:
        json.dump(kept, f, indent=1)
    for name, rows in kept.items():
        means = {k: statistics.fmean(r[k] for r in rows if r.get(k) is not None)
                 for k in ("reference_rate", *FIGURES, "wait")}
        print(f"{name:10s} probes {len(rows)} " + " ".join(f"{k} {v:.3g}" for k, v in means.items()))
        for k in (*FIGURES, "wait"):
            pairs = [(r[k] if k == "wait" else math.log(r[k]), math.log(r["reference_rate"])) for r in rows if r.get(k)]
            if len(pairs) > 3:
                print(f"   corr(reference, {k}) {statistics.correlation(*zip(*pairs, strict=True)):+.2f}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
