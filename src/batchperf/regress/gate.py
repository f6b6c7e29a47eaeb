"""The regression gate: a direction and a noise-aware tolerance per metric, a verdict per metric and per cell.

Every rule is a gated entry of the metric catalogue (:mod:`batchperf.measure.catalogue`, the one place to
change a default). A metric
regresses when it moved in its bad direction by more than its tolerance::

    tolerance = max(floor[metric, tier], k × spread)

where ``spread`` is the baseline's own round-to-round relative spread (population
std / |median| over ``extra_info.rounds``), or, for a single-valued metric whose catalogue entry names its
stored spread (a capacity search's ``capacity.spread``), that stored figure. Exact metrics (KV bytes) have no
tolerance at all: any change is a regression, everywhere, except where a padded
batch formed under open-loop arrivals sets the figure (reported, not deciding). That
rule, the client-bound one and the exact tolerance are :mod:`batchperf.regress.judgeable`'s,
shared with ``ab``. Changes are relative, so the unit a metric is stored in never matters.

The spread term has a ceiling, ``cap[metric, tier]``: a metric whose baseline is so
noisy that k × spread exceeds it cannot be gated, and says so (*too noisy to gate*)
(an *inconclusive* verdict) instead of passing; it still fails a change beyond even its noise. A baseline value
the gate cannot judge against (NaN, infinite, negative, a zero throughput) is *not
judged*, never a pass. A cell passes (*no change*) only when every metric it was compared on did. A metric the
catalogue reports but does not gate on a tier (P99 latencies on the GPU tier) is judged and shown, marked
*reported*, and does not decide the cell. A GPU cell whose clocks did not hold (:mod:`batchperf.telemetry.gpu_clocks`) is
*not judged*, with the cause. The notes (:mod:`batchperf.regress.cell_notes`) also name a software power cap, a GPU
driver that differs from the baseline's, and wall time and CPU time per token disagreeing. The verdicts
and the table are :mod:`batchperf.regress.verdict`'s, shared with ``compare`` and ``ab``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, replace

from batchperf.measure.catalogue import GATED, Direction, Metric
from batchperf.measure.slo import NO_TENANT, STARVATION_MIN_S, STARVATION_SHARE
from batchperf.regress.cell_notes import disagreement, driver_note, power_cap_notes, void_notes
from batchperf.regress.fingerprint import (
    Fingerprint,
    cell_identity,
    identity_diff,
    lacking_note,
    soft_warnings,
    version_diff,
)
from batchperf.regress.judgeable import EXACT_REL, not_judged_reason, reported_reason
from batchperf.regress.machine import MODES
from batchperf.regress.verdict import CellVerdict, MetricVerdict, Verdict, combine, render_text
from batchperf.results.record import CellRecord, RecordPath

_ABSENT = object()
MISSING_NOTE = "missing: the baseline has it, this run does not (a check was lost)"


@dataclass(frozen=True, slots=True)
class GateConfig:
    rules: tuple[Metric, ...] = GATED  # the catalogue's gated entries, in its order
    k: float = 3.0  # tolerance in units of the baseline's relative round-to-round spread
    # a regression while the machine itself measured slower (regress.machine): "mark" it, or call it "not-judged"
    machine_moved: str = "mark"

    def __post_init__(self) -> None:
        if not (self.k >= 0 and math.isfinite(self.k)):
            raise ValueError(f"gate k must be a finite number >= 0, got {self.k}")
        if self.machine_moved not in MODES:
            raise ValueError(f"gate machine_moved must be one of {', '.join(MODES)}, got {self.machine_moved!r}")
        names = [r.path for r in self.rules]
        if len(set(names)) != len(names):
            raise ValueError("gate rules name a metric twice")
        if ungated := [r.path for r in self.rules if r.tolerance is None]:
            raise ValueError(f"gate rules need a tolerance: {', '.join(ungated)}")

    def with_floor(self, metric: str, value: float, tier: str = "*") -> GateConfig:
        """This config with ``metric``'s floor for ``tier`` set (``metric`` may omit its ``metrics.`` prefix)."""
        matches = [r for r in self.rules if metric in (r.path, r.name)]
        if not matches:
            raise ValueError(f"no gate rule for metric {metric!r}; known: {', '.join(r.name for r in self.rules)}")
        target = matches[0]
        if target.direction is Direction.EXACT:
            raise ValueError(f"{target.path} is exact: it has no tolerance to override")
        old = target.tolerance
        assert old is not None  # every rule has one (checked above)
        tolerance = replace(old, floors={**({} if tier == "*" else old.floors), tier: value})
        new = replace(target, tolerance=tolerance)
        return replace(self, rules=tuple(new if r is target else r for r in self.rules))


def relative_spread(record: CellRecord, path: RecordPath) -> float:
    """Population std / |median| of ``path`` over the record's rounds; 0 with fewer than two rounds.

    NaN when a round holds a value that is not a finite number >= 0 (the spread is unknown), and
    infinite when the values spread around a median of 0."""
    keys = tuple(path.split(".")) if isinstance(path, str) else path
    if len(keys) != 2 or keys[0] != "metrics":  # only the metrics section has a value per round
        return 0.0
    name = keys[1]
    raw = [r[name] for r in record.rounds if isinstance(r, Mapping) and name in r]
    if any(bad_number(v) for v in raw):
        return math.nan
    values = [float(v) for v in raw]
    if len(values) < 2:
        return 0.0
    mid = abs(statistics.median(values))
    std = statistics.pstdev(values)
    if mid == 0:
        return 0.0 if std == 0 else math.inf
    return std / mid


def stored_spread(record: CellRecord, path: str) -> float:
    """The 1-sd relative spread the record states at ``path`` (a capacity search's); 0 when it states none (the
    floor alone then judges), NaN when it is not a finite number >= 0."""
    raw = record.raw(path)
    if raw is None:
        return 0.0
    return math.nan if bad_number(raw) else float(raw)


def bad_number(value: object) -> str | None:
    """Why ``value`` is no measurement to judge against (a measurement is a finite number >= 0), or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{value!r} is not a number"
    if not math.isfinite(value):
        return f"{value} is not finite"
    return f"{value} is negative" if value < 0 else None


def relative_change(baseline: float, measured: float) -> float:
    if baseline == measured:
        return 0.0
    if baseline == 0:
        return math.copysign(math.inf, measured)
    return (measured - baseline) / abs(baseline)


def _unusable_baseline(rule: Metric, raw: object, spread: float) -> str | None:
    """Why the baseline's value of ``rule``'s metric cannot be judged against, or None."""
    if why := bad_number(raw):
        return f"baseline value {why}"
    if raw == 0 and rule.direction is Direction.HIGHER and not rule.absolute:
        return "baseline value is 0: nothing completed, no relative change to judge"
    if math.isnan(spread):
        return "a baseline round holds a value that is not a finite number >= 0"
    return None


def judge_against_baseline(rule: Metric, baseline: CellRecord, current: CellRecord, tier: str, k: float,
                           tenant: str | None = None) -> MetricVerdict | None:
    """One metric's verdict (of one ``tenant`` for a per-tenant rule); None when the baseline does not have it or
    the catalogue does not judge it on ``tier``. ``deciding`` is False where it is reported only (P99 latencies on
    the GPU)."""
    if not rule.judged_on(tier):
        return None
    verdict = _judge_against_baseline(rule, baseline, current, tier, k, tenant)
    return None if verdict is None else replace(verdict, deciding=rule.decides(tier))


def _judge_against_baseline(rule: Metric, baseline: CellRecord, current: CellRecord, tier: str, k: float,
                            tenant: str | None) -> MetricVerdict | None:
    path, shown = rule.keys, rule.path
    if tenant is not None:  # tenants.attainment of tenant "chat": keys (tenants, chat, attainment), shown attainment[chat]
        path, shown = rule.tenant_keys(tenant), f"{rule.path}[{tenant or 'all'}]"
    raw = baseline.raw(path, _ABSENT)
    if raw is _ABSENT:
        return None
    measured = current.value(path)
    spread = stored_spread(baseline, rule.spread) if rule.spread else relative_spread(baseline, path)
    if why := _unusable_baseline(rule, raw, spread):
        base = float(raw) if isinstance(raw, (int, float)) else math.nan
        return MetricVerdict(shown, rule.direction, Verdict.NOT_JUDGED, base, measured, math.nan, math.nan,
                             note=why, absolute=rule.absolute)
    base = float(raw)  # type: ignore[arg-type]  # a finite number >= 0, checked above
    slack, cap = k * spread, rule.cap(tier)
    noisy = rule.direction is not Direction.EXACT and slack > cap
    tolerance = EXACT_REL if rule.direction is Direction.EXACT else max(rule.floor(tier), slack)
    if measured is None:
        return MetricVerdict(shown, rule.direction, Verdict.FAILED, base, None, math.nan, tolerance,
                             note=MISSING_NOTE, absolute=rule.absolute)
    # an absolute rule (SLO attainment) moves in the metric's own unit: points of a ratio, not a share of it
    change = measured - base if rule.absolute else relative_change(base, measured)
    worse = {Direction.HIGHER: -change, Direction.LOWER: change, Direction.EXACT: abs(change)}[rule.direction]
    note = ""
    if worse > tolerance:  # beyond even the baseline's own noise: a regression, noisy or not
        verdict = Verdict.REGRESSION
    elif noisy:
        verdict = Verdict.INCONCLUSIVE
        note = (f"too noisy to gate: {k:g} × the baseline's round-to-round spread is ±{slack:.0%}, above the cap "
                f"of {cap:.0%}")
    elif rule.direction is not Direction.EXACT and -worse > tolerance:
        verdict = Verdict.IMPROVEMENT
    else:
        verdict = Verdict.NO_CHANGE
    return MetricVerdict(shown, rule.direction, verdict, base, measured, change, tolerance, note=note,
                         absolute=rule.absolute)


def judge_rule(rule: Metric, baseline: CellRecord, current: CellRecord, tier: str, k: float) -> list[MetricVerdict]:
    """``rule``'s verdicts: one, or one per tenant of the baseline for a per-tenant rule."""
    if not rule.per_tenant:
        found = judge_against_baseline(rule, baseline, current, tier, k)
        return [] if found is None else [found]
    block = baseline.raw(rule.section) or {}
    if set(block) == {NO_TENANT}:  # a workload without tenants: its one block repeats the cell's own numbers
        return []
    verdicts = (judge_against_baseline(rule, baseline, current, tier, k, t) for t in sorted(block))
    return [v for v in verdicts if v is not None]


def not_judged(result: MetricVerdict, baseline: CellRecord, current: CellRecord) -> MetricVerdict:
    """``result`` as *not judged* when a client-bound run (this one or the baseline) measured it, or it is the
    capacity of a search that never bracketed the crossing (:func:`batchperf.regress.judgeable.not_judged_reason`)."""
    for record, side in ((current, "this run"), (baseline, "the baseline")):
        if (note := not_judged_reason(result.metric, record, side)) is not None:
            return replace(result, verdict=Verdict.NOT_JUDGED, note=note)
    return result


def reported_only(result: MetricVerdict, baseline: CellRecord, current: CellRecord) -> MetricVerdict:
    """``result`` reported, not deciding, when either run's figure depended on its arrival timing, or is a capacity
    record's probe's (:func:`batchperf.regress.judgeable.reported_reason`)."""
    for record in (current, baseline):
        if (note := reported_reason(result.metric, record)) is not None:
            return replace(result, deciding=False, note="; ".join(filter(None, (result.note, note))))
    return result


STARVED = "starved tenant(s)"  # how a starvation note starts (confirm keeps it)


def starvation_note(record: CellRecord) -> str | None:
    """Why a cell whose policy starved a tenant is failed whatever its metrics say (measure.slo: backlogged for the
    starvation window with no token while another tenant was served); None when no tenant starved. The one wording:
    the cell's failed test, the session's summary and the gate's note all say this."""
    hungry = record.starved()
    if not hungry:
        return None
    worst = ", ".join(f"{t or '(no tenant)'} ({record.tenants[t].get('longest_unserved_s', 0):.2f} s unserved)"
                      for t in hungry)
    return (f"{STARVED}: {worst} under policy {record.raw('policy.text', 'fcfs')!r}: backlogged with no token while "
            f"later arrivals of another tenant were served (>= {STARVATION_MIN_S:g} s and {STARVATION_SHARE:.0%} of the "
            "run); never a pass (docs/policies.md)")


def compare_cell(
    name: str,
    baseline: CellRecord | None,
    current: CellRecord,
    config: GateConfig = GateConfig(),
    baseline_fp: Fingerprint | None = None,
    current_fp: Fingerprint | None = None,
) -> CellVerdict:
    """Compare one cell with its baseline; never compares across a mismatched identity. A cell that starved a
    tenant fails, with or without a baseline."""
    verdict = _compare_cell(name, baseline, current, config, baseline_fp, current_fp)
    return _starved(verdict, current)


def _starved(verdict: CellVerdict, record: CellRecord) -> CellVerdict:
    note = starvation_note(record)
    return verdict if note is None else replace(verdict, verdict=Verdict.FAILED, notes=(*verdict.notes, note))


def _compare_cell(
    name: str,
    baseline: CellRecord | None,
    current: CellRecord,
    config: GateConfig = GateConfig(),
    baseline_fp: Fingerprint | None = None,
    current_fp: Fingerprint | None = None,
) -> CellVerdict:
    """Compare one cell with its baseline; never compares across a mismatched identity."""
    if baseline is None:
        return CellVerdict(name, Verdict.NO_BASELINE, notes=("no baseline entry for this cell",))
    diffs: list[str] = []
    if baseline_fp is not None and current_fp is not None:
        lacking = lacking_note(baseline_fp.identity, current_fp.identity)
        # what an older baseline lacks is said once, with its fix (below), not field by field as "(absent)"
        now = current_fp.identity if lacking is None else current_fp.identity.older()
        diffs += [f"hardware.{d}" for d in identity_diff(baseline_fp.identity.to_dict(), now.to_dict())]
        diffs += [lacking] if lacking else []
    diffs += identity_diff(cell_identity(baseline), cell_identity(current))
    if diffs:
        return CellVerdict(name, Verdict.NO_BASELINE, notes=tuple(diffs))
    tier = current.tier
    results = [r for rule in config.rules for r in judge_rule(rule, baseline, current, tier, config.k)]
    results = [reported_only(not_judged(r, baseline, current), baseline, current) for r in results]
    versions, warnings = {}, ()
    if baseline_fp is not None and current_fp is not None:
        versions = version_diff(baseline_fp.upgrade, current_fp.upgrade)
        warnings = tuple(soft_warnings(baseline_fp.soft, current_fp.soft))
    verdict = combine((r.verdict for r in results if r.deciding), empty=Verdict.NOT_JUDGED)
    void = void_notes(baseline, current)
    if void:
        verdict = Verdict.NOT_JUDGED  # the card's state, not the code: never a pass, never a regression
    why = void + driver_note(versions) + (() if results else ("the baseline has none of the gated metrics",))
    if verdict is Verdict.IMPROVEMENT:
        why += ("better beyond its tolerance: refresh suggested (batchperf refresh)",)
    why += disagreement(results) + power_cap_notes(baseline, current)
    return CellVerdict(name, verdict, tuple(results), why, versions, warnings, void=bool(void))


def confirm(first: CellVerdict, second: CellVerdict) -> CellVerdict:
    """Combine a first violation with its re-measurement: a metric fails only if it failed both times. A void side
    (its GPU did not hold its clocks) is no measurement: the re-measurement alone decides."""
    if first.verdict is Verdict.NO_BASELINE or second.verdict is Verdict.NO_BASELINE or first.void or second.void:
        return replace(second, remeasured=True)
    before = {r.metric: r for r in first.metrics}
    merged = []
    for r in second.metrics:
        prior = before.get(r.metric)
        verdict, note = r.verdict, r.note
        if verdict.failed and not (prior is not None and prior.verdict.failed):
            verdict, note = Verdict.NO_CHANGE, ""  # failed only once: noise, not a confirmed regression
        merged.append(replace(r, verdict=verdict, note=note, first_measured=prior.measured if prior else None))
    verdict = combine((r.verdict for r in merged if r.deciding), empty=Verdict.NOT_JUDGED)
    if any(n.startswith(STARVED) for n in second.notes):  # the re-measurement starved a tenant too: still failed
        verdict = Verdict.FAILED
    return replace(second, verdict=verdict, metrics=tuple(merged), remeasured=True)


def render_table(verdict: CellVerdict) -> str:
    """The failure message: one aligned table, then the notes and the upgrade-axis versions that differ."""
    return render_text(verdict).replace("batchperf: ", "batchperf gate: ", 1)
