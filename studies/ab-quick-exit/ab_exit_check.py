#!/usr/bin/env python
"""What ``batchperf ab``'s quick exit saves: one cell's process run the old way (``python -m pytest``) and the new
(``batchperf.launch.suite.QUICK_EXIT``: pytest to its end, then ``os._exit``), interleaved, N times each.

Prints, per run, the whole process's seconds and the seconds after pytest's end (the phases plugin's
``unconfigure`` stamp to the process's exit), then the means. On a quiet machine (a couple of minutes):

    OMP_NUM_THREADS=1 PYTHONPATH=src python studies/ab-quick-exit/ab_exit_check.py --runs 5 --cell compute
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from batchperf.ab.env import Environment, default_checkout
from batchperf.calibrate.cells import DETECTOR_CELLS  # the detector's cells: the same selection, one definition
from batchperf.launch.environ import PHASES_ENV


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="processes each way (default 5)")
    parser.add_argument("--cell", choices=sorted(DETECTOR_CELLS), default="compute")
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds a process (default 3)")
    args = parser.parse_args()
    env = Environment("A", Path(sys.executable), (), default_checkout())
    out = Path(tempfile.mkdtemp(prefix="batchperf-exit-check-"))
    rows: dict[str, list[tuple[float, float]]] = {"old": [], "quick": []}
    for i in range(args.runs):
        for mode in rows:
            stem = out / f"{mode}{i}"
            # "old": python -m pytest, as ab ran it before the quick exit
            cmd = env.pytest_command(["-p", "batchperf.launch.phases", *DETECTOR_CELLS[args.cell].selection,
                                      f"--batchperf-rounds={args.rounds}", "--batchperf-progress=off"],
                                     Path(f"{stem}.json"), quick_exit=mode == "quick")
            started = time.time()
            done = subprocess.run(cmd, cwd=env.dir, env={**env.process_env(), PHASES_ENV: f"{stem}.phases.json"},
                                  stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, check=False)
            ended = time.time()
            if done.returncode != 0:
                sys.exit(f"ab_exit_check: the {mode} process exited {done.returncode}")
            after = ended - json.loads(Path(f"{stem}.phases.json").read_text())["unconfigure"]
            rows[mode].append((ended - started, after))
            print(f"{mode:5} run {i + 1}: {ended - started:6.2f} s, {after:5.2f} s after pytest's end, "
                  f"load {os.getloadavg()[0]:.2f}", flush=True)
    for mode, values in rows.items():
        print(f"{mode:5} mean: {statistics.mean(v[0] for v in values):6.2f} s a process, "
              f"{statistics.mean(v[1] for v in values):5.2f} s after pytest's end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
