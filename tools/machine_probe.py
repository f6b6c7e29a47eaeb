"""N machine probes in a row: each one's figures, then the mean and sd% of each (the probe's own repeatability).

    PYTHONPATH=src python tools/machine_probe.py --count 10

The probe is :mod:`batchperf.telemetry.probe` (single-thread fp32 GEMM, memory copy bandwidth, an
interpreter-bound loop, each the median of short repeats, in a child with one BLAS thread); the suite
records it before the first cell and after the last of every session (docs/baselines.md). On a quiet
machine each figure should repeat to within 2% sd; neighbours on a shared host show up as a lower mean
and a wider sd.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from batchperf.telemetry.probe import FIGURES, probe, repeatability


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10, metavar="N", help="probes in a row (default 10)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write every probe here")
    args = parser.parse_args(argv)
    if args.count < 2:
        parser.error(f"--count must be >= 2 (an sd needs two probes), got {args.count}")
    names = list(FIGURES)
    print("probe  " + "  ".join(f"{FIGURES[n][0]} {FIGURES[n][1]:>8}" for n in names) + "  seconds")
    probes = []
    for i in range(args.count):
        probes.append(got := probe())
        cells = [f"{got.figures[n]:>{len(FIGURES[n][0]) + 9}.3f}" if n in got.figures
                 else f"{'missing':>{len(FIGURES[n][0]) + 9}}" for n in names]
        print(f"{i + 1:>5}  " + "  ".join(cells) + f"  {got.seconds:7.2f}", flush=True)
        for name, why in got.missing.items():
            print(f"       {name} missing: {why}", file=sys.stderr)
    print()
    for r in repeatability(probes):
        what, unit = FIGURES[r.name]
        print(f"{what:<12} mean {r.mean:10.3f} {unit:<8} sd {r.sd_pct:5.2f}%  ({r.n} probes"
              + (f", {r.missing} missing)" if r.missing else ")"))
    if args.json:
        args.json.write_text(json.dumps([p.to_dict() for p in probes], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
