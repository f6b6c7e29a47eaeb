"""The detector study's verdicts: per cell kind, A/A verdicts of this interpreter against itself and verdicts with
B slowed by the documented injection, each a full ``batchperf ab`` run in a folder of its own; run again into the
same folder, it resumes (finished verdicts are kept, an unfinished one is set aside and measured again)."""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from batchperf.ab.env import Environment, default_checkout
from batchperf.ab.result import AbResult
from batchperf.ab.run import run_ab
from batchperf.ab.settings import DESIGNS, Settings
from batchperf.ab.stats import DEFAULT_TEST
from batchperf.calibrate.cells import DETECTOR_CELLS
from batchperf.calibrate.scores import MINUTES_TARGET, Key, Score, finished, fmt, score
from batchperf.launch.environ import INJECT_SLOWDOWN_ENV

AbRun = Callable[..., AbResult]  # run_ab(settings, progress=...)
# what a verdict recorded before these settings existed ran with
RECORDED_BEFORE = {"test": "signed-rank", "design": "sequential", "keep_servers": False}


class StudyProblem(ValueError):
    """The study cannot go on as asked; the message names the folder, the problem and the fix."""


@dataclass(frozen=True, slots=True)
class Study:
    """What to measure: ``aa`` A/A verdicts and ``slowed`` slowed ones per kind, with ab's settings for each."""

    kinds: tuple[str, ...]
    aa: int = 20
    slowed: int = 20
    slowdowns: Mapping[str, float] = field(default_factory=dict)  # kind -> B's slowdown, instead of the cell's own
    extra: tuple[str, ...] = ()  # more pytest arguments for every process
    metrics: tuple[str, ...] = ("output_throughput",)
    margin: float = 0.03
    alpha: float = 0.05
    max_pairs: int = 14
    max_minutes: float = MINUTES_TARGET
    rounds: int | None = 3  # None: ab's own choice from its warm-up (batchperf.ab.warmup.choose_rounds)
    test: str = DEFAULT_TEST
    design: str = "sequential"
    keep_servers: bool = False

    def __post_init__(self) -> None:
        if unknown := [k for k in (*self.kinds, *self.slowdowns) if k not in DETECTOR_CELLS]:
            raise ValueError(f"kinds: unknown cell kind(s) {unknown}; known: {', '.join(DETECTOR_CELLS)}")
        if self.aa < 0 or self.slowed < 0:
            raise ValueError(f"aa, slowed: verdicts per cell cannot be negative, got {self.aa} and {self.slowed}")
        if not self.metrics:
            raise ValueError("metrics: give at least one deciding metric")
        if self.design not in DESIGNS:
            raise ValueError(f"design: {self.design!r} is not one of {', '.join(DESIGNS)}")

    def plan(self) -> list[tuple[str, float, int]]:
        """(kind, slowdown, index) of every verdict, interleaved (kinds, A/A and slowed) so drift hits all alike."""
        plan = [(kind, 0.0, i) for kind in self.kinds for i in range(self.aa)]
        plan += [(kind, self.slowdowns.get(kind, DETECTOR_CELLS[kind].slowdown), i)
                 for kind in self.kinds for i in range(self.slowed)]
        return sorted(plan, key=lambda p: (p[2], p[0], p[1]))

    def settings(self, kind: str, slowdown: float, index: int, work: Path) -> Settings:
        """One verdict's ab settings: this interpreter as A, and as B with its forward passes slowed."""
        here, python = default_checkout(), Path(sys.executable)
        b_vars = ((INJECT_SLOWDOWN_ENV, str(slowdown)),) if slowdown else ()
        return Settings(Environment("A", python, dir=here), Environment("B", python, b_vars, here),
                        (*DETECTOR_CELLS[kind].selection, *self.extra), work / f"{kind}-{slowdown:g}-{index:02d}",
                        margin=self.margin, metrics=self.metrics, alpha=self.alpha, max_pairs=self.max_pairs,
                        max_minutes=self.max_minutes, rounds=self.rounds, test=self.test, design=self.design,
                        keep_servers=self.keep_servers)


@dataclass(frozen=True, slots=True)
class StudyRun:
    rows: dict[Key, list[Score]]  # (kind, slowdown) -> the scores of its verdicts, in the order measured
    stopped: str = ""  # why the study stopped before its plan's end ("" when it did not)


def _recorded_differences(settings: Settings, doc: dict[str, Any]) -> list[str]:
    wanted = {"margin": settings.margin, "metrics": list(settings.metrics), "alpha": settings.alpha,
              "rounds": settings.rounds, "max_pairs": settings.max_pairs, "max_minutes": settings.max_minutes,
              "test": settings.test, "design": settings.design, "keep_servers": settings.keep_servers,
              "pytest_args": list(settings.pytest_args)}
    recorded = {**RECORDED_BEFORE, **doc["settings"]}
    # ab records the design it ran and, beside it, the one asked (auto runs resident on a CPU): compare what was asked
    recorded["design"] = recorded.get("design_asked") or recorded["design"]
    return [k for k, v in wanted.items() if recorded[k] != v]


def run_study(study: Study, work: Path, say: Callable[[str], None], ab: AbRun = run_ab) -> StudyRun:
    """Run (or resume) the planned verdicts under ``work``, saying a line each (and ab's own line a pair); a
    :class:`StudyProblem` for a kept verdict measured with other settings."""
    plan = study.plan()
    rows: dict[Key, list[Score]] = {}
    started = time.monotonic()
    for n, (kind, slowdown, i) in enumerate(plan, 1):
        settings = study.settings(kind, slowdown, i, work)
        doc, status, reason = finished(settings.out), "kept", ""
        if doc is not None and (differ := _recorded_differences(settings, doc)):
            raise StudyProblem(f"{settings.out} was measured with other settings ({', '.join(differ)}); give the "
                               "same options to resume it, or another --keep folder")
        if doc is None:
            if settings.out.exists():  # an unfinished verdict (interrupted, failed): set aside, measured again
                shutil.move(settings.out, settings.out.with_name(f"{settings.out.name}.unfinished-{int(time.time())}"))
            try:
                result = ab(settings, progress=lambda line: say(f"    {line}"))  # a pair a line
            except KeyboardInterrupt:  # before the verdict's first pair (probing the environments): nothing of it kept
                return StudyRun(rows, f"interrupted before {settings.out.name}'s first pair; the finished verdicts "
                                      f"are in {work}: give the same command to resume")
            doc, status, reason = result.to_dict(), result.status, result.reason
            if status == "interrupted":  # cut short, not a verdict: set aside and measured again on resume
                return StudyRun(rows, f"stopping, the verdict interrupted: {reason}; {n - 1} finished verdict(s) "
                                      f"counted, the cut one measured again when the same command is given")
        s = score(doc, study.metrics[0])
        rows.setdefault((kind, slowdown), []).append(s)
        load = doc["load_avg_1m"]
        kept = " (kept from an earlier run)" if status == "kept" else ""
        say(f"[{n}/{len(plan)}] {kind} slowdown {slowdown:.0%} #{i + 1}: {s.verdict} after {s.pairs} pair(s), "
            f"{s.minutes:.1f} min; {study.metrics[0]} {fmt(s.estimate, '+.1%')} width {fmt(s.width, '.1%')}; "
            f"load {fmt(load['median'] if load else None, '.2f')}{kept}  [{(time.monotonic() - started) / 60:.0f} min]")
        (work / "scores.json").write_text(json.dumps(
            {f"{k}|{sl}": [asdict(x) for x in v] for (k, sl), v in rows.items()}, indent=1))
        if status == "failed":
            return StudyRun(rows, f"stopping, the verdict failed: {reason}")
    return StudyRun(rows)

