"""One cell of a ``batchperf ab`` run over the pairs so far: each metric's values (:class:`PairSeries`) and the
cell's state (:class:`CellState`), as they are judged (:mod:`batchperf.ab.judging`) and written to ``ab.json``
(:mod:`batchperf.ab.result` holds the run around them)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from batchperf.ab.stats import signed_rank
from batchperf.ab.stats.signed_rank import Interval
from batchperf.measure.catalogue import Direction
from batchperf.regress.verdict import CellVerdict, MetricVerdict, Verdict


@dataclass(slots=True)
class PairSeries:
    """One metric of one cell over the pairs so far: A's and B's value per pair, and what they say."""

    metric: str  # the catalogue name, e.g. output_throughput
    direction: Direction
    deciding: bool
    margin: float
    a: list[float] = field(default_factory=list)  # per pair, A's value
    b: list[float] = field(default_factory=list)
    # per pair, ln(B/A) round-paired (:func:`round_paired`); None (or absent) where the rounds cannot be paired
    paired: list[float | None] = field(default_factory=list)
    interval: Interval | None = None
    call: Verdict = Verdict.INCONCLUSIVE
    note: str = ""  # why it is not judged or is still open (an exact metric: see exact_call)
    reported_why: str = ""  # why a metric that would decide is reported only (judgeable.arrival_reason)
    caveat: str = ""  # what its verdict does not say in this cell (judgeable.open_loop_caveat)

    @property
    def shown_note(self) -> str:
        """What its row says: why it is open or not judged, why it only reports, what its verdict does not say."""
        return "; ".join(filter(None, (self.note, self.reported_why, self.caveat)))

    @property
    def log_ratios(self) -> list[float]:
        """Each pair's ln(B/A): round-paired where its rounds pair, else of its two medians (both positive)."""
        out = []
        for i, (x, y) in enumerate(zip(self.a, self.b)):
            if i < len(self.paired) and self.paired[i] is not None:
                out.append(self.paired[i])
            elif x > 0 and y > 0:
                out.append(math.log(y / x))
        return out

    def verdict(self) -> MetricVerdict:
        """This series as the one metric verdict (reference A's median, measured B's, the interval's estimate)."""
        iv = self.interval
        a = statistics.median(self.a) if self.a else None
        b = statistics.median(self.b) if self.b else None
        change = signed_rank.relative(iv.estimate) if iv else math.nan
        return MetricVerdict(self.metric, self.direction, self.call, a, b, change,
                             math.nan if self.direction is Direction.EXACT else self.margin,
                             interval=(signed_rank.relative(iv.low), signed_rank.relative(iv.high)) if iv else None,
                             pairs=len(self.a), deciding=self.deciding, note=self.shown_note)

    def to_dict(self) -> dict[str, Any]:
        iv = self.interval
        return {
            "metric": self.metric, "direction": self.direction.value, "deciding": self.deciding,
            "margin": self.margin, "a": self.a, "b": self.b, "ratios": [y / x if x else None for x, y in zip(self.a, self.b)],
            **({"paired_ratios": [None if v is None else math.exp(v) for v in self.paired]}
               if any(v is not None for v in self.paired) else {}),
            "n": len(self.a), "call": self.call.value, **({"note": self.shown_note} if self.shown_note else {}),
            **({"estimate": signed_rank.relative(iv.estimate), "low": signed_rank.relative(iv.low),
                "high": signed_rank.relative(iv.high)} if iv else {}),
        }


def round_paired(a: Sequence[float] | None, b: Sequence[float] | None) -> float | None:
    """A pair's ln(B/A) round-paired: the median over i of ln(B_i / A_i), A's and B's i-th measured rounds (in the
    resident design they ran back to back, each turn's first side alternating, so what the machine did in those
    seconds divides out); None when either side has no rounds or the two sides ran different numbers of them.

    On the detector's rows (studies/ab-detector, "Round-paired pairs") a pair's sd was 0.022-0.030 this way against
    0.039-0.055 as the ratio of the two sides' medians on vLLM's engine cell, at 40 rounds a process."""
    if not a or not b or len(a) != len(b):
        return None
    return statistics.median(math.log(y / x) for x, y in zip(a, b))


@dataclass(slots=True)
class CellState:
    id: str
    nodeid: str
    verdict: Verdict = Verdict.INCONCLUSIVE
    settled_at: int | None = None  # pairs behind the frozen verdict
    metrics: dict[str, PairSeries] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)  # environment label -> what happened
    note: str = ""
    client_bound: list[str] = field(default_factory=list)  # pairs whose client set some metrics: left out of them

    @property
    def settled(self) -> bool:
        return self.settled_at is not None

    def cell_verdict(self) -> CellVerdict:
        """This cell as the one cell verdict: deciding metrics first, then the exact ones, then those reported."""
        ordered = sorted(self.metrics.values(), key=lambda m: (not m.deciding, m.direction is Direction.EXACT))
        why = ([self.note] if self.note else []) + [f"in {label}: {w}" for label, w in sorted(self.failures.items())]
        if self.client_bound:
            why.append(f"{len(self.client_bound)} pair(s) client-bound, left out of the metrics their client set: "
                       + "; ".join(self.client_bound[:3]) + ("; …" if len(self.client_bound) > 3 else ""))
        return CellVerdict(self.id, self.verdict, tuple(m.verdict() for m in ordered), tuple(why),
                           settled_at=self.settled_at)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "nodeid": self.nodeid, "verdict": self.verdict.value, "settled_at": self.settled_at,
                "failures": self.failures, "note": self.note, "client_bound": self.client_bound,
                "metrics": [m.to_dict() for m in self.metrics.values()]}
