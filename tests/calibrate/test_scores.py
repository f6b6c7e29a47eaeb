"""batchperf.calibrate.scores: a verdict's score read back from its ab.json, and only finished verdicts read."""

from __future__ import annotations

from pathlib import Path

import pytest
from detector_samples import keep, verdict_doc

from batchperf.calibrate.scores import Score, finished, measured, score, table


def test_score_and_resume_read_only_finished_verdicts(tmp_path: Path) -> None:
    keep(tmp_path / "dispatch-0.1-00", verdict_doc([0.9] * 8, 50.0, "done"))
    keep(tmp_path / "dispatch-0.1-01", verdict_doc([0.9] * 3, 50.0, "interrupted"))
    keep(tmp_path / "dispatch-0.1-00.unfinished-1", verdict_doc([0.9] * 3, 50.0, "done"))  # set aside: not read
    found = measured(tmp_path)
    assert list(found) == [("dispatch", 0.1)] and len(found[("dispatch", 0.1)]) == 1
    s = score(found[("dispatch", 0.1)][0], "output_throughput")
    assert (s.verdict, s.pairs, s.estimate) == ("regression", 8, -0.1)
    assert s.width == pytest.approx(0.15) and s.minutes == pytest.approx((20 + 400) / 60)
    assert finished(tmp_path / "dispatch-0.1-01") is None


def test_the_table_counts_verdicts_against_the_target() -> None:
    rows = {("dispatch", 0.1): [Score("regression", 8, 7.0, 0.15, -0.1), Score("inconclusive", 14, 10.0, None, None)],
            ("dispatch", 0.0): [Score("no change", 10, 5.0, 0.04, 0.0)]}
    slowed, aa = table(rows).splitlines()[2:]
    assert slowed.startswith("| dispatch-bound hf-static bs4 p64 c16 | 10% |")
    assert "| 10% | 2 | 1 (50%) | 0 | 1 | 0 | 11 | 8.5 (10.0) | 15.0% | -10.0% |" in slowed
    assert slowed.endswith("| regression >= 18/20, each <= 10 min |")
    assert "| 0% (A/A) | 1 | 0 (0%) | 1 | 0 | 0 | 10 |" in aa and aa.endswith("| regression <= 1/20, each <= 10 min |")
