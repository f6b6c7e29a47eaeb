"""Small steps of ``ci/nightly.sh`` that need Python: ``python -m batchperf.regress.nightly STEP ...``.

- ``history-name RESULTS TIER``: the file name a run gets in the history folder (time, commit, tier), so
  names sort in run order and two nights never collide.
- ``baseline-path RESULTS BASELINES``: this run's pinned baseline, ``BASELINES/<fingerprint key>/baseline.json``.
- ``confirmed-regressions RESULTS``: exit 1 (listing them) when a cell carries the gate's confirmed failure
  (its verdict after the re-measure, stored in ``extra_info["gate"]``); used after merging shards.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

FAILED_VERDICTS = ("regression", "missing")  # batchperf.regress.gate.Verdict values whose .failed is true


def _load(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise SystemExit(f"batchperf.regress.nightly: cannot read results {path}: {exc}") from None


def history_name(data: dict[str, Any], tier: str) -> str:
    stamp = re.sub(r"[^0-9T]", "", str(data.get("datetime") or ""))[:15] or "unknown-time"
    commit = str((data.get("commit_info") or {}).get("id") or "nocommit")[:12]
    return f"{stamp}-{commit}-{tier}.json"


def baseline_path(data: dict[str, Any], baselines: Path) -> Path:
    fingerprint = (data.get("machine_info") or {}).get("batchperf") or {}
    key = fingerprint.get("key")
    if not key:
        raise SystemExit("batchperf.regress.nightly: the results have no fingerprint (machine_info.batchperf.key); "
                         "they were made without the gate plugin")
    return baselines / key / "baseline.json"


def confirmed_regressions(data: dict[str, Any]) -> list[str]:
    found = []
    for bench in data.get("benchmarks", []):
        info = bench.get("extra_info") or {}
        gate = info.get("gate") or {}
        if gate.get("verdict") in FAILED_VERDICTS:
            cell = (info.get("cell") or {}).get("id", bench.get("name"))
            found.append(f"{cell}: {gate['verdict']} ({', '.join(gate.get('regressed') or []) or 'no metric named'})")
    return found


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        raise SystemExit(__doc__)
    step, results, *rest = argv
    data = _load(Path(results))
    if step == "history-name" and len(rest) == 1:
        print(history_name(data, rest[0]))
    elif step == "baseline-path" and len(rest) == 1:
        print(baseline_path(data, Path(rest[0])))
    elif step == "confirmed-regressions" and not rest:
        found = confirmed_regressions(data)
        for line in found:
            print(f"confirmed regression: {line}")
        return 1 if found else 0
    else:
        raise SystemExit(__doc__)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
