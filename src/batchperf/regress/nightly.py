"""Small steps of ``ci/nightly.sh`` that need Python: ``python -m batchperf.regress.nightly STEP ...``.

- ``history-name RESULTS TIER``: the file name a run gets in the history folder (time, commit, tier), so
  names sort in run order and two nights never collide.
- ``baseline-path RESULTS BASELINES``: this run's pinned baseline, ``BASELINES/<fingerprint key>/baseline.json``.
- ``confirmed-regressions RESULTS``: exit 1 (listing them) when a cell carries the gate's confirmed failure
  (its verdict after the re-measure, stored in ``extra_info["gate"]``); used after merging shards.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from batchperf.regress.verdict import stored
from batchperf.results.io import ResultsFile, read_results
from batchperf.results.record import ResultsError


def history_name(results: ResultsFile, tier: str) -> str:
    stamp = re.sub(r"[^0-9T]", "", results.datetime)[:15] or "unknown-time"
    commit = str(results.commit_info.get("id") or "nocommit")[:12]
    return f"{stamp}-{commit}-{tier}.json"


def baseline_path(results: ResultsFile, baselines: Path) -> Path:
    key = (results.fingerprint or {}).get("key")
    if not key:
        raise SystemExit("batchperf.regress.nightly: the results have no fingerprint (machine_info.batchperf.key); "
                         "they were made without the gate plugin")
    return baselines / key / "baseline.json"


def confirmed_regressions(results: ResultsFile) -> list[str]:
    """Cells whose stored gate verdict (after the re-measurement) is a failure."""
    found = []
    for rec in results.records:
        gate = rec.gate or {}
        if (verdict := stored(gate.get("verdict"))) is not None and verdict.failed:
            found.append(f"{rec.id}: {gate['verdict']} ({', '.join(gate.get('regressed') or []) or 'no metric named'})")
    return found


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        raise SystemExit(__doc__)
    step, path, *rest = argv
    try:
        results = read_results(path)
    except ResultsError as exc:
        raise SystemExit(f"batchperf.regress.nightly: {exc}") from None
    if step == "history-name" and len(rest) == 1:
        print(history_name(results, rest[0]))
    elif step == "baseline-path" and len(rest) == 1:
        print(baseline_path(results, Path(rest[0])))
    elif step == "confirmed-regressions" and not rest:
        found = confirmed_regressions(results)
        for line in found:
            print(f"confirmed regression: {line}")
        return 1 if found else 0
    else:
        raise SystemExit(__doc__)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
