"""Experiment (issue 57; studies/capacity-repeat, "A machine tick inside each probe"): a pytest plugin that, in a
capacity probe's process, times a fixed small interpreter loop (2,000 additions) every 10 ms in a thread (the
machine's speed during the run) and records the absolute start of every measured run (``RunClock.start`` inside
each ``run_cell`` call), written at the session's end to $TICKMON_DIR/<pid>.json. Each probe gets it through the
capacity command's pytest arguments:

    PYTHONPATH=src:studies/capacity-repeat TICKMON_DIR=/tmp/tick/quiet-1 batchperf capacity ... -- -p tickmon
"""
import json
import os
import threading
import time

_ticks, _runs, _stop = [], [], threading.Event()
N = 2000


def _loop():
    while not _stop.is_set():
        t = time.perf_counter(); s = 0
        for i in range(N):
            s += i
        _ticks.append((t, time.perf_counter() - t))
        time.sleep(0.01)


def pytest_configure(config):
    import batchperf.measure.clock as clock
    import batchperf.suite.cell as cell
    starts = []
    orig_start = clock.RunClock.start

    def start(self):
        orig_start(self)
        starts.append(self._t0)
    clock.RunClock.start = start
    orig_run = cell.run_cell

    def run_cell(*a, **k):
        n = len(starts)
        out = orig_run(*a, **k)
        _runs.append({"start": starts[-1] if len(starts) > n else None, "end": time.perf_counter(),
                      "load": getattr(a[1], "load", None) if len(a) > 1 else None})
        return out
    cell.run_cell = run_cell
    config._tickmon_json = config.getoption("benchmark_json", None)
    threading.Thread(target=_loop, daemon=True).start()


def pytest_unconfigure(config):
    _stop.set()
    bj = config._tickmon_json
    path = os.path.join(os.environ.get("TICKMON_DIR", "/tmp/tickmon/out"), f"{os.getpid()}.json")
    with open(path, "w") as f:
        json.dump({"benchmark_json": getattr(bj, "name", str(bj)), "runs": _runs, "ticks": _ticks}, f)
