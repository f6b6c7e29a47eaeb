"""The seventh quiet search on the model 1 host (2026-12-07 23:34–23:44 UTC) ran its 24 probes, and then its record
was refused: its fit's speed effect was negative (-2.4) and the record check then held every measured number >= 0
(fixed: ``capacity.speed_effect`` is signed). This writes its record as ``batchperf capacity`` now would, from its
probes folder (kept in /tmp for the session, not in the repository) and the probes' figures kept in
``data/f25m1-speed/issue57-probes.json``; the search's seconds are the command's own, start to end (times.txt).

    PYTHONPATH=src python studies/capacity-repeat/recover_quiet7.py /tmp/s57/issue57-quiet-7-probes
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from batchperf.capacity.probe import nearest
from batchperf.capacity.record import write_capacity
from batchperf.capacity.search import Capacity, ProbeResult, SearchSettings, fit_runs

DATA = Path(__file__).parent / "data" / "f25m1-speed"
SECONDS = 592.0  # 23:34:36 to 23:44:28 UTC

if __name__ == "__main__":
    folder = Path(sys.argv[1])
    kept = json.loads((DATA / "issue57-probes.json").read_text())["quiet-7"]
    files = sorted(folder.glob("probe[0-9][0-9]-load*.json"))
    if len(files) != len(kept):
        raise SystemExit(f"{folder}: {len(files)} probes, but issue57-probes.json keeps {len(kept)} for quiet-7")
    settings = SearchSettings(target=0.9, resolution=0.05, start=8.0, budget_s=600.0)  # the docs' command
    runs = tuple((p["load"], ProbeResult(p["met"], p["offered"], p["request_rate"], p["reference_rate"])) for p in kept)
    fitted = fit_runs(runs, settings)
    capacity = Capacity(settings, runs, fitted, "budget", SECONDS)
    load, path = nearest([(float(p.stem.split("-load")[1]), p) for p in files], capacity.max_load)
    write_capacity(DATA / "issue57-quiet-7.json", path, capacity, load)
    print(capacity.describe())
