"""``batchperf ab --confirm``: one pair, and when it calls a change, the same pair again with B first.

The chain's rule (:mod:`batchperf.releases.confirm`) for a single upgrade: the first ``ab`` runs into ``OUT`` as usual;
if a cell's verdict is a regression or an improvement, a second ``ab`` of the same cells with the sides swapped runs
into ``OUT/confirmation/`` (new processes, after the first), and the call stands only where it agrees.
``OUT/confirmed.json`` says, per call, the confirmation's verdict and estimate and whether it stands; the exit code
counts confirmed calls only. A run with no call costs nothing more.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from batchperf.ab.result import AbResult
from batchperf.ab.settings import Settings, UsageProblem
from batchperf.releases import confirm
from batchperf.releases.chain import CONFIRM, STEP, AbRun, ChainStep, explained
from batchperf.results.io import atomic_write_text

FOLDER = "confirmation"
NAME = "confirmed.json"


@dataclass(frozen=True, slots=True)
class ConfirmedPair:
    """Both runs and what they say together: ``step`` holds the first run's cells and, when it called a change, its
    confirmation (``step.confirmation``)."""

    first: AbResult
    second: AbResult | None  # None: nothing to confirm, or the first run was interrupted
    step: ChainStep

    @property
    def exit_code(self) -> int:
        """An interrupted run's own code; else ab's codes over the cells' final verdicts (docs/ab.md)."""
        for run in (self.first, self.second):
            if run is not None and run.status == "interrupted":
                return run.exit_code
        return confirm.EXIT[self.step.final_outcome] if self.step.cells else self.first.exit_code

    def to_dict(self) -> dict[str, Any]:
        data = self.step.to_dict()
        return {"batchperf_confirmed": 1, "exit_code": self.exit_code, "outcome": self.step.final_outcome,
                **{k: data[k] for k in ("calls", "explained")}}


def run_confirmed(settings: Settings, ab: AbRun, progress: Callable[[str], None] = lambda line: None) -> ConfirmedPair:
    """``ab`` of ``settings``; if it called a change and was not interrupted, ``ab`` again, sides swapped, into
    ``OUT/confirmation/``; ``OUT/confirmed.json`` written either way."""
    first = ab(settings, progress=progress)
    step = ChainStep(STEP, 0, 1, ".")
    step.take(first.to_dict())
    second = None
    if step.calls and first.status != "interrupted":
        progress(f"confirming {', '.join(f'{c}: {v}' for c, v in step.calls.items())}: the same pair again, B first, "
                 f"into {settings.out / FOLDER}")
        step.confirmation = ChainStep(CONFIRM, 0, 1, FOLDER)
        try:
            second = ab(confirm.reversed_sides(settings, settings.out / FOLDER),
                        progress=lambda line: progress(f"confirmation: {line}"))
        except UsageProblem as exc:  # the first run took the same settings, so the machine changed between them
            again = step.confirmation
            again.exit_code, again.status, again.reason = 3, "failed", f"refused before its first pair: {exc}"
        else:
            step.confirmation.take(second.to_dict())
            step.explained = explained(step, settings.out, {})  # a new pair: no former explanation to keep
    pair = ConfirmedPair(first, second, step)
    atomic_write_text(settings.out / NAME, json.dumps(pair.to_dict(), indent=1) + "\n")
    return pair


def summary_lines(pair: ConfirmedPair) -> list[str]:
    """One line per call: confirmed or not, with the confirmation's verdict and estimate."""
    lines = []
    for cell, entry in pair.to_dict()["calls"].items():
        again = entry["confirmation"] or {}
        est = again.get("estimate")
        said = f"{again.get('verdict', 'not run')}" + (f", {est:+.1%}" if est is not None else "")
        state = {True: "confirmed", False: "NOT confirmed", None: "not confirmed yet"}[entry["confirmed"]]
        lines.append(f"{cell}: {entry['call']} {state} (the confirmation, B first: {said})")
    return lines
