"""Why a confirmed call happened: the engine figures that differ between the two releases, in both runs.

The release study explained each confirmed call by hand from the records (vLLM's decode time per request fell 7.6%
while the scheduler did the same work: 113 engine steps a round, 12.46 tokens a step). This does it from the pairs'
results files an ``ab`` run leaves: per figure of :data:`batchperf.measure.catalogue.ENGINE_FIGURES` that a cell's
records carry, its per-pair values go through ab's own judging (:func:`batchperf.ab.judging.judge_metric`, the run's
kind of interval, at one look over all its pairs: :data:`LEVEL`), giving B/A - 1 with its 95% interval, or for
an exact figure the value-for-value comparison. A figure *differs* when its interval lies on one side of 0 (an exact
one: differs in every pair), in the call's run and in its confirmation alike.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from batchperf.ab.cell import PairSeries
from batchperf.ab.judging import judge_metric
from batchperf.ab.stats import one_look
from batchperf.ab.stats.signed_rank import relative
from batchperf.measure.catalogue import BY_PATH, ENGINE_FIGURES, Direction
from batchperf.regress.verdict import Verdict
from batchperf.results.io import read_results
from batchperf.results.record import ResultsError

# two-sided: a figure's interval in each run is one look at 95% over all its pairs, of the run's own kind
# (batchperf.ab.stats.one_look), not the run's sequential boundary at the look where it stopped: that one holds the
# run's split alpha over looks it never took (a chain's t run stopping at pair 5 of 8 is judged at |t| 9.04, one
# look at 95% at 2.78), and a figure makes no call. It *differs* only where both runs, the call's and its
# confirmation's, exclude 0 on the same side: when the releases do not differ in it, a chance of
# 2 x (LEVEL / 2)^2 = 0.00125 a figure.
LEVEL = 0.05


@dataclass(frozen=True, slots=True)
class Figure:
    """One engine figure of one cell over a run's pairs: B/A - 1 (estimate, interval) and which way it differs."""

    metric: str  # the catalogue path, counters.request_decode_time_seconds
    estimate: float
    low: float
    high: float
    pairs: int
    sign: int  # +1 higher in B, -1 lower, 0 not shown to differ

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "estimate": self.estimate, "low": self.low, "high": self.high,
                "pairs": self.pairs}


def _results(path: str | None, folder: Path) -> Path | None:
    """A pair's results file: where ab.json says, else by its name in the run's folder (a chain copied elsewhere)."""
    if not path:
        return None
    given = Path(path)
    return given if given.is_file() else folder / given.name


def _records(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        return {r.id: r for r in read_results(path).records}
    except (OSError, ResultsError, ValueError):
        return {}  # a pair whose file is gone or unreadable gives no values; the others still count


def figures(folder: Path, ab: Mapping[str, Any], cell: str, reverse: bool = False) -> dict[str, Figure]:
    """Every engine figure ``cell``'s records carry in the ``ab`` run in ``folder``, as the pair's B/A (``reverse``:
    the run had the sides swapped, a confirmation's)."""
    kind = "t" if ab.get("settings", {}).get("test") == "t" else "signed-rank"  # as recorded_test reads it
    series = {path: PairSeries(path, BY_PATH[path].direction, False, 0.0) for path in ENGINE_FIGURES}
    for pair in ab.get("pairs", []):
        sides = [_records(_results((pair.get(label) or {}).get("results"), folder)).get(cell) for label in "AB"]
        a, b = reversed(sides) if reverse else sides
        if a is None or b is None:
            continue
        for path, s in series.items():
            x, y = a.value(BY_PATH[path].keys), b.value(BY_PATH[path].keys)
            if x is not None and y is not None:
                s.a.append(x)
                s.b.append(y)
    out = {}
    for path, s in series.items():
        if not s.a:
            continue  # this cell's records do not carry it
        judge_metric(s, one_look(kind, len(s.a), LEVEL))
        out[path] = _figure(s)
    return out


def _figure(s: PairSeries) -> Figure:
    if s.interval is not None:
        low, high = relative(s.interval.low), relative(s.interval.high)
        return Figure(s.metric, relative(s.interval.estimate), low, high, len(s.a), 1 if low > 0 else -1 if high < 0
                      else 0)
    a, b = statistics.median(s.a), statistics.median(s.b)
    change = b / a - 1 if a else 0.0
    differs = s.direction is Direction.EXACT and s.call is Verdict.REGRESSION
    return Figure(s.metric, change, change, change, len(s.a), (1 if change > 0 else -1) if differs and change else 0)


def results_present(folder: Path, ab: Mapping[str, Any]) -> bool:
    """Whether any pair's results file of the ``ab`` run in ``folder`` is there to explain from (a chain resumed from
    its committed files has each run's ``ab.json`` only)."""
    return any((path := _results((pair.get(label) or {}).get("results"), folder)) is not None and path.is_file()
               for pair in ab.get("pairs", []) for label in "AB")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _figure_stored(value: Any) -> bool:
    return (isinstance(value, dict) and isinstance(value.get("metric"), str) and value["metric"] in BY_PATH
            and all(_number(value.get(key)) for key in ("estimate", "low", "high", "pairs")))


def stored(value: Any) -> dict[str, Any] | None:
    """An explanation as ``chain.json`` keeps it (what :func:`explain` returned), or None when it is of another shape
    (a hand edit): every field ``chain.md`` reads, checked."""
    if not isinstance(value, dict) or not isinstance(compared := value.get("compared"), list) \
            or not isinstance(differ := value.get("differ"), list):
        return None
    if not all(isinstance(path, str) and path in BY_PATH for path in compared):
        return None
    if not all(_figure_stored(f) and _figure_stored(f.get("confirmation")) for f in differ):
        return None
    return value


def explain(call: tuple[Path, Mapping[str, Any]], confirmation: tuple[Path, Mapping[str, Any]],
            cell: str) -> dict[str, Any]:
    """What ``chain.json`` keeps beside a confirmed call: the figures compared, and those that differ the same way in
    the call's run and in its confirmation, each with both intervals."""
    first = figures(*call, cell)
    again = figures(*confirmation, cell, reverse=True)
    differ = [{**f.to_dict(), "confirmation": again[path].to_dict()} for path, f in first.items()
              if f.sign and path in again and again[path].sign == f.sign]
    return {"compared": sorted(first), "differ": differ}
