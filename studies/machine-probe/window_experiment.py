"""Does a longer window, more repeats or the best repeat steady the machine probe's figures?

Ten in-process measurements of each figure per setting (repeats x seconds a repeat, median or best), on the
machine as it is; prints each figure's mean and sd%. The probe itself (batchperf.telemetry.probe) runs
7 x ~20 ms, median, in a child process.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 PYTHONPATH=src python studies/machine-probe/window_experiment.py
"""

from __future__ import annotations

import argparse
import statistics

import batchperf.telemetry.probe as probe

SETTINGS = [(7, 0.02, "median"), (15, 0.03, "median"), (15, 0.03, "best"), (9, 0.05, "median")]


def measure(repeats: int, repeat_s: float, stat: str, n: int = 10) -> dict[str, str]:
    def rate(work, unit):  # noqa: ANN001, ANN202 - probe._median_rate with the setting's window and statistic
        calls = max(1, round(repeat_s / max(work(1), 1e-7)))
        values = [unit * calls / max(work(calls), 1e-9) for _ in range(repeats)]
        return max(values) if stat == "best" else statistics.median(values)

    real, probe._median_rate = probe._median_rate, rate
    try:
        found = {name: [fn() for _ in range(n)] for name, fn in probe.MEASURES.items()}
    finally:
        probe._median_rate = real
    return {name: f"{statistics.fmean(v):.1f} sd {100 * statistics.stdev(v) / statistics.fmean(v):.1f}%"
            for name, v in found.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10, help="measurements of each figure per setting (default 10)")
    args = parser.parse_args(argv)
    if args.runs < 2:
        parser.error(f"--runs must be >= 2 (an sd needs two), got {args.runs}")
    for setting in SETTINGS:
        print(setting, measure(*setting, n=args.runs), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
