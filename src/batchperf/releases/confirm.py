"""A call confirmed: the pair measured again by a fresh ``ab``, the two sides' order reversed, before the call stands.

Pinpoint and the perf-CI systems people trust report no change until it has been measured again: of the eleven
calls five release chains made, a second run by hand confirmed six (docs/upgrades.md). A call is confirmed when a
second ``ab`` of the same pair — new processes, later, with B's process first in every pair where the call had A's
(:func:`reversed_sides`) — decides the same change in the same cell; anything else (no change, inconclusive, the
other way) leaves it *not confirmed*, which counts as inconclusive, never as a call.

The confirmation's own ``ab.json`` names its sides by position (its A is the pair's B); :func:`flipped` turns its
cells back into the pair's B/A so both runs read alike. Shared by ``batchperf chain`` (:mod:`batchperf.releases.chain`)
and ``batchperf ab --confirm`` (:mod:`batchperf.releases.pair`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from batchperf.ab.settings import Settings
from batchperf.measure.catalogue import Direction, by_name
from batchperf.regress.verdict import Verdict, combine

CALLS = (Verdict.REGRESSION.value, Verdict.IMPROVEMENT.value)
SWAP = {Verdict.REGRESSION.value: Verdict.IMPROVEMENT.value, Verdict.IMPROVEMENT.value: Verdict.REGRESSION.value}
PENDING = "pending"  # a call whose confirmation has not finished yet
# a pair's outcome (its cells' final verdicts) -> its exit code, as ab's (docs/upgrades.md, "Exit codes")
EXIT = {"regression": 1, "failed": 4, "inconclusive": 2, PENDING: 2, "no regression": 0}


def reversed_sides(settings: Settings, out: Path) -> Settings:
    """The same run with the sides swapped into ``out``: ab's pairs go A B, B A, …, so the pair's B now runs first.

    Each environment keeps its own label, so the confirmation's lines and failures name the release they are about."""
    return replace(settings, a=settings.b, b=settings.a, out=out)


def _exact(metric: str) -> bool:
    try:
        return by_name(metric.partition("[")[0]).direction is Direction.EXACT
    except KeyError:
        return False


def _inverse(x: float | None) -> float | None:
    """B/A - 1 of the swapped run -> the pair's: 1 / (1 + x) - 1."""
    return None if x is None or x <= -1 else 1 / (1 + x) - 1


def flipped(cell: dict[str, Any]) -> dict[str, Any]:
    """A cell summary of the swapped run as the pair's: every ratio inverted (the interval's ends swap), the medians
    swapped, regression and improvement swapped (an exact metric's "regression" means "differs" either way), and
    the cell's call made again from its deciding metrics'."""
    metrics = {}
    for name, m in cell.get("metrics", {}).items():
        call = m.get("call")
        metrics[name] = {**m, "estimate": _inverse(m.get("estimate")), "low": _inverse(m.get("high")),
                         "high": _inverse(m.get("low")), "a_median": m.get("b_median"), "b_median": m.get("a_median"),
                         "call": call if _exact(name) else SWAP.get(call, call)}
    verdict = cell.get("verdict")
    if verdict in CALLS:
        deciding = [Verdict(m["call"]) for m in metrics.values() if m.get("deciding") and m.get("call")]
        verdict = combine(deciding, empty=Verdict(SWAP[verdict])).value
    return {**cell, "verdict": verdict, "metrics": metrics}


def final_verdict(verdict: str, confirmation: dict[str, Any] | None, finished: bool) -> str:
    """A cell's verdict once its confirmation is in: a call stands only where the confirmation (``None``: no cell
    there) decided the same; a confirmation that failed in the cell fails it; any other answer makes it
    inconclusive (measured once, not twice). :data:`PENDING` while the confirmation has not finished."""
    if verdict not in CALLS:
        return verdict
    if not finished:
        return PENDING
    again = (confirmation or {}).get("verdict", Verdict.FAILED.value)
    if again == verdict:
        return verdict
    return Verdict.FAILED.value if again in (Verdict.FAILED.value, Verdict.NOT_JUDGED.value) else \
        Verdict.INCONCLUSIVE.value


def outcome(finals: Iterable[str], failed: bool) -> str:
    """A pair's outcome from its cells' final verdicts, ranked as ab ranks its exit code (a regression, then a
    failure — ``failed``: the run itself failed —, then an undecided cell); the key of :data:`EXIT`."""
    seen = set(finals)
    if Verdict.REGRESSION.value in seen:
        return "regression"
    if failed or seen & {Verdict.FAILED.value, Verdict.NOT_JUDGED.value}:
        return "failed"
    if PENDING in seen:
        return PENDING
    return "inconclusive" if Verdict.INCONCLUSIVE.value in seen else "no regression"
