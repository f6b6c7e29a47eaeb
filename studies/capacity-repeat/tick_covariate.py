"""Each search of data/f25m1-tick refitted with the machine tick measured in its probes' own processes
(tickmon.py) as each probe's speed (studies/capacity-repeat, "A machine tick inside each probe").

    PYTHONPATH=src python studies/capacity-repeat/tick_covariate.py   # data/f25m1-tick/tick-rows.json
    PYTHONPATH=src python studies/capacity-repeat/tick_covariate.py --collect quiet-1 quiet-2 slowed-10 quiet-3
        # wrote it from the probes folders /tmp/s59/issue57-NAME-probes and the ticks /tmp/tickmon/out/NAME/

Speeds (1 / a tick's seconds): ``tick_run`` the median over the probe's measured run, ``tick_wait`` the mean over
the moments requests waited for their first token (once per waiting request), ``tick_ref`` over the reference
round, ``tick_proc`` over the whole process; ``ref`` the reference round's rate (today's); ``none``.
"""
import glob
import json
import math
import os
import statistics as st
import sys
from pathlib import Path

from batchperf.capacity.probe import kept_probes, read_probe
from batchperf.capacity.record import probe_records
from batchperf.capacity.search import ProbeResult, SearchSettings, fit_runs
from batchperf.results.io import read_results

S = SearchSettings(target=0.9, resolution=0.05, start=8.0)


def window_ticks(ticks, a, b):
    return [d for t, d in ticks if a <= t <= b]


def probe_rows(name):
    probes = kept_probes(Path(f"/tmp/s59/issue57-{name}-probes"))
    ticks = sorted(glob.glob(f"/tmp/tickmon/out/{name}/*.json"), key=os.path.getmtime)
    rows = []
    for (load, path), tf in zip(probes, ticks):
        tm = json.load(open(tf))
        runs = [r for r in tm["runs"] if r["load"] == load]
        assert len(runs) == 2, (tf, load, tm["runs"])
        start = runs[-1]["start"]
        got = read_probe(path, load)
        probe, _ = probe_records(read_results(path, "probe results"), load)
        tr = probe.run_traces()[0]
        tk = tm["ticks"]
        run_ticks = window_ticks(tk, start, start + tr.end)
        # waiting-weighted: each tick counted once per request waiting for its first token at that moment
        waits = [(start + r.arrival, start + (r.token_times[0] if r.token_times else tr.end)) for r in tr.requests]
        weighted = [d for t, d in tk if start <= t <= start + tr.end for a, b in waits if a <= t <= b]
        ref_runs = [r for r in tm["runs"] if r["load"] == 64.0]
        ref_ticks = window_ticks(tk, ref_runs[-1]["start"], ref_runs[-1]["end"]) if ref_runs else []
        rows.append({"load": load, "met": got.met, "offered": got.offered, "ref": got.reference_rate,
                     "tick_run": 1 / st.median(run_ticks), "tick_wait": 1 / st.fmean(weighted) if weighted else None,
                     "tick_ref": 1 / st.median(ref_ticks) if ref_ticks else None,
                     "tick_proc": 1 / st.median(d for _, d in tk)})
    return rows


ROWS = Path(__file__).parent / "data" / "f25m1-tick" / "tick-rows.json"


def main(names):
    if names[:1] == ["--collect"]:
        ROWS.write_text(json.dumps({n: probe_rows(n) for n in names[1:]}))
    data = json.loads(ROWS.read_text())
    for cov in ("ref", "tick_run", "tick_wait", "tick_ref", "tick_proc", "none"):
        out = []
        for n, rows in data.items():
            runs = [(r["load"], ProbeResult(r["met"], r["offered"], 0.0, None if cov == "none" else r[cov]))
                    for r in rows]
            f = fit_runs(runs, S)
            out.append(f"{n} {f.capacity:.3f} (sd {f.sd:.1%}, disp {f.dispersion:.1f}, c {f.speed_effect or 0:.1f})")
        print(f"{cov:10s}", " | ".join(out))
    for n, rows in data.items():
        for k in ("ref", "tick_run", "tick_wait", "tick_proc"):
            xs = [math.log(r[k]) for r in rows if r[k]]
            print(n, k, "sd of log speed over probes %.1f%%" % (100 * st.pstdev(xs)), end="; ")
        print()


if __name__ == "__main__":
    main(sys.argv[1:])
