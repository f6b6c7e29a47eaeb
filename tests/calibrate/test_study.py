"""batchperf.calibrate.study: the verdicts planned, run through ab (a fake here), kept and resumed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from detector_samples import keep, verdict_doc

from batchperf.ab.settings import Settings
from batchperf.calibrate.study import Study, StudyProblem, run_study


def recorded(settings: Settings, status: str = "done") -> dict[str, Any]:
    """The ab.json a verdict run with ``settings`` leaves."""
    doc = verdict_doc([0.9] * 8, 50.0, status)
    doc["settings"].update(test=settings.test, design=settings.design, keep_servers=settings.keep_servers,
                           pytest_args=list(settings.pytest_args), max_pairs=settings.max_pairs,
                           max_minutes=settings.max_minutes, rounds=settings.rounds)
    return doc


class FakeAb:
    """run_ab's stand-in: a verdict per call, ``status`` as ab would end it."""

    def __init__(self, status: str = "done") -> None:
        self.status, self.reason, self.runs = status, "a cell failed" if status == "failed" else "", []

    def __call__(self, settings: Settings, progress: Any) -> FakeAb:
        self.runs.append(settings.out.name)
        progress("pair 1: ...")
        self.doc = recorded(settings, self.status)
        return self

    def to_dict(self) -> dict[str, Any]:
        return self.doc


def test_a_study_names_its_bad_field() -> None:
    with pytest.raises(ValueError, match=r"kinds: unknown cell kind\(s\) \['gpu'\]"):
        Study(("compute", "gpu"))
    with pytest.raises(ValueError, match="aa, slowed: "):
        Study(("compute",), aa=-1)
    with pytest.raises(ValueError, match="metrics: "):
        Study(("compute",), metrics=())


def test_the_plan_interleaves_kinds_and_slowdowns() -> None:
    plan = Study(("compute", "dispatch"), aa=2, slowed=1, slowdowns={"dispatch": 0.2}).plan()
    assert plan == [("compute", 0.0, 0), ("compute", 0.05, 0), ("dispatch", 0.0, 0), ("dispatch", 0.2, 0),
                    ("compute", 0.0, 1), ("dispatch", 0.0, 1)]


def test_finished_verdicts_are_kept_and_the_rest_measured(tmp_path: Path) -> None:
    study = Study(("dispatch",), aa=0, slowed=2)
    keep(tmp_path / "dispatch-0.1-00", recorded(study.settings("dispatch", 0.1, 0, tmp_path)))
    keep(tmp_path / "dispatch-0.1-01", recorded(study.settings("dispatch", 0.1, 1, tmp_path), "interrupted"))
    lines: list[str] = []
    ab = FakeAb()
    done = run_study(study, tmp_path, lines.append, ab)
    assert ab.runs == ["dispatch-0.1-01"] and done.stopped == ""
    assert [s.verdict for s in done.rows[("dispatch", 0.1)]] == ["regression", "regression"]
    assert "(kept from an earlier run)" in lines[0] and lines[1] == "    pair 1: ..."
    assert [p.name for p in tmp_path.glob("dispatch-0.1-01.unfinished-*")]  # the interrupted one, set aside
    assert (tmp_path / "scores.json").is_file()


def test_a_verdict_kept_with_other_settings_is_refused(tmp_path: Path) -> None:
    study = Study(("dispatch",), aa=0, slowed=1)
    keep(tmp_path / "dispatch-0.1-00", recorded(study.settings("dispatch", 0.1, 0, tmp_path)))
    ab = FakeAb()
    with pytest.raises(StudyProblem, match=r"dispatch-0.1-00 was measured with other settings \(rounds\)"):
        run_study(Study(("dispatch",), aa=0, slowed=1, rounds=5), tmp_path, lambda line: None, ab)
    assert ab.runs == []


def test_a_verdict_run_with_design_auto_resumes_with_design_auto(tmp_path: Path) -> None:
    """ab records the design it ran (``resident``) and the one asked (``auto``): the same command resumes."""
    study = Study(("dispatch",), aa=0, slowed=2, design="auto")
    doc = recorded(study.settings("dispatch", 0.1, 0, tmp_path))
    doc["settings"].update(design="resident", design_asked="auto")
    keep(tmp_path / "dispatch-0.1-00", doc)
    ab = FakeAb()
    run_study(study, tmp_path, lambda line: None, ab)
    assert ab.runs == ["dispatch-0.1-01"]
    with pytest.raises(StudyProblem, match=r"other settings \(design\)"):  # asked for another design: refused
        run_study(Study(("dispatch",), aa=0, slowed=2, design="sequential"), tmp_path, lambda line: None, FakeAb())


def test_a_failed_verdict_stops_the_study_saying_why(tmp_path: Path) -> None:
    ab = FakeAb("failed")
    done = run_study(Study(("dispatch",), aa=2, slowed=0), tmp_path, lambda line: None, ab)
    assert ab.runs == ["dispatch-0-00"] and done.stopped == "stopping, the verdict failed: a cell failed"


def test_an_interrupted_verdict_is_not_counted_and_is_measured_again_on_resume(tmp_path: Path) -> None:
    """Seen: a study stopped by SIGTERM printed its cut verdict (2 pairs) as an inconclusive one of its row."""
    ab = FakeAb("interrupted")
    ab.reason = "interrupted (SIGTERM) during pair 3; that pair is discarded, the 2 finished pair(s) are reported"
    done = run_study(Study(("dispatch",), aa=2, slowed=0), tmp_path, lambda line: None, ab)
    assert ab.runs == ["dispatch-0-00"] and done.rows == {}
    assert done.stopped.startswith("stopping, the verdict interrupted: interrupted (SIGTERM) during pair 3")
    assert not (tmp_path / "scores.json").exists()
    again = FakeAb()
    resumed = run_study(Study(("dispatch",), aa=2, slowed=0), tmp_path, lambda line: None, again)
    assert again.runs == ["dispatch-0-00", "dispatch-0-01"] and len(resumed.rows[("dispatch", 0.0)]) == 2
