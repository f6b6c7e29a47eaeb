"""A results file without its per-request traces, small enough to commit (issue 55's evidence of each host kind).

    .venv/bin/python studies/host-kinds/slim.py RESULTS.json OUT.json

Everything the gate, ``compare`` and ``compare --hardware`` read stays: the machine info (fingerprint and probes),
each cell's rounds, metrics, KV, counters and telemetry. Only ``traces`` go (the report's per-request plots), as a
refreshed baseline drops them too.
"""

from __future__ import annotations

import sys
from pathlib import Path

from batchperf.results.io import read_results, write_results


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    run = read_results(argv[0])
    out = write_results(Path(argv[1]), run.header, [*(run.entry(n, with_traces=False) for n in run.cells),
                                                    *run.others])
    print(f"{out}: {len(run.cells)} cells, {out.stat().st_size / 1e3:.0f} kB (was "
          f"{Path(argv[0]).stat().st_size / 1e3:.0f} kB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
