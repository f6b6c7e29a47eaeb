"""The capacity search against simulated probes: binomial noise (seeded) around a known capacity, a fake clock.

The simulated cell's true attainment falls linearly with the load and crosses the target exactly at ``capacity``;
each run offers ``n`` requests and meets Binomial(n, p) of them, where p is the true attainment plus, optionally,
a run-level Gaussian shift of ``tau`` (the machine: fresh processes vary more than the binomial). The rates below
are properties of the algorithm, measured over seeded searches, with no timing in them.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from batchperf.capacity.search import (
    ABSOLUTE_FLOOR,
    RELATIVE_FLOOR,
    Pool,
    ProbeResult,
    SearchSettings,
    binomial_spread,
    bracket_slope,
    dispersion,
    drift,
    ratio_error,
    search,
    search_spread,
    wilson,
)

TARGET = 0.9


class Cell:
    """A simulated cell: attainment = TARGET + slope × (1 − load / capacity), clipped to [0, 1]; ``slope`` is the
    drop in attainment per unit of relative load (3: 30 points per 10% more load)."""

    def __init__(self, capacity: float, slope: float = 3.0, n: int = 60, tau: float = 0.0, seed: int = 0,
                 seconds: float = 10.0, reference: float | None = None) -> None:
        self.capacity, self.slope, self.n, self.tau, self.seconds = capacity, slope, n, tau, seconds
        self.reference = reference  # req/s served saturated in each probe's process (None: no reference round)
        self.rng = np.random.default_rng(seed)
        self.now = 0.0
        self.loads: list[float] = []

    def true(self, load: float) -> float:
        return float(np.clip(TARGET + self.slope * (1 - load / self.capacity), 0.0, 1.0))

    def __call__(self, load: float) -> ProbeResult:
        self.loads.append(load)
        self.now += self.seconds
        p = self.true(load)
        if self.tau:
            p = float(np.clip(p + self.rng.normal(0.0, self.tau), 0.0, 1.0))
        return ProbeResult(int(self.rng.binomial(self.n, p)), self.n, request_rate=4.0 * load,
                           reference_rate=self.reference)

    def clock(self) -> float:
        return self.now


def searched(cell: Cell, s: SearchSettings | None = None):
    return search(cell, s or SearchSettings(), clock=cell.clock)


def rates(s: SearchSettings, pairs: int = 200, **cell: float) -> tuple[float, float]:
    """Over ``pairs`` pairs of seeded searches of the same cell: the share whose bracket, widened by one resolution
    on each side, holds the true capacity; and the share of pairs whose capacities agree within the resolution."""
    holds = agree = 0
    for k in range(pairs):
        a, b = Cell(seed=2 * k, **cell), Cell(seed=2 * k + 1, **cell)
        ra, rb = searched(a, s), searched(b, s)
        holds += ra.max_load * (1 - s.resolution) <= a.capacity <= ra.bracket_high * (1 + s.resolution)
        agree += abs(ra.max_load - rb.max_load) <= s.resolution * max(ra.max_load, rb.max_load)
    return holds / pairs, agree / pairs


# --- the answer is right and repeatable ----------------------------------------------------------------------------


def test_without_noise_the_bracket_holds_the_true_capacity_within_the_resolution() -> None:
    cell = Cell(capacity=3.1, n=10**9)  # a billion requests a run: the binomial is the true attainment
    got = searched(cell, SearchSettings(bisect_runs=1))
    assert got.converged and got.why == "" and not got.undecided
    assert got.max_load <= cell.capacity <= got.bracket_high
    assert got.width <= 0.05
    assert got.max_request_rate == pytest.approx(4.0 * got.max_load)
    assert got.attainment_at_max_load >= TARGET
    assert got.probes[0][0] == 1.0  # started at the stated load
    assert len(cell.loads) == len(set(cell.loads)), "a load whose interval excludes the target runs once"


def test_binomial_noise_alone_the_bracket_holds_the_capacity_and_two_searches_agree_at_the_stated_rates() -> None:
    # 60 requests a run (the CPU sustained fixture), a gentle curve (10 points per 10% of load): measured 100% / 97%
    holds, agree = rates(SearchSettings(), capacity=13.0, slope=1.0, n=60)
    assert holds >= 0.95 and agree >= 0.93, (holds, agree)


def test_with_run_to_run_noise_too_pooling_keeps_the_stated_rates() -> None:
    # a run-level shift of 5 points on top of the binomial (fresh processes on a shared machine): measured 98% / 95.5%
    holds, agree = rates(SearchSettings(), capacity=13.0, slope=3.0, n=60, tau=0.05)
    assert holds >= 0.92 and agree >= 0.90, (holds, agree)


def test_pooling_and_the_interval_agree_far_more_often_than_one_run_a_load() -> None:
    # the same cell searched as main did before (a load decided on one run): measured 72.5% agreement against 95.5%
    _, pooled = rates(SearchSettings(), capacity=13.0, slope=3.0, n=60, tau=0.05)
    _, single = rates(SearchSettings(confidence=0.0, repeats=1, bisect_runs=1), capacity=13.0, slope=3.0, n=60, tau=0.05)
    assert pooled - single >= 0.15, (pooled, single)


def test_the_binomial_spread_of_the_sustained_fixture_is_within_the_resolution() -> None:
    # 4 pooled runs of 60 requests at p = 0.9 on a slope of 3: sqrt(0.09 / 240) / 3 = 0.65% of the load
    assert binomial_spread(0.9, 240, 3.0) == pytest.approx(math.sqrt(0.09 / 240) / 3)
    assert binomial_spread(0.9, 240, 3.0) < 0.05 / 2
    assert binomial_spread(0.9, 60, 3.0, phi=4.0) == pytest.approx(2 * math.sqrt(0.09 / 60) / 3)
    with pytest.raises(ValueError, match="slope"):
        binomial_spread(0.9, 60, 0.0)


@given(st.floats(0.6, 20), st.integers(0, 10_000), st.sampled_from([0.0, 0.05]))
@settings(max_examples=60, deadline=None)
def test_every_search_obeys_its_rules(capacity: float, seed: int, tau: float) -> None:
    s = SearchSettings()
    cell = Cell(capacity=capacity, tau=tau, seed=seed)
    got = searched(cell, s)
    assert got.converged
    assert got.bracket_high - got.max_load <= s.resolution * got.max_load
    # the runs at one load are consecutive: the bracket never moved between them
    firsts = [load for i, load in enumerate(cell.loads) if i == 0 or cell.loads[i - 1] != load]
    assert firsts == list(got.pools) and len(firsts) == len(set(firsts))
    for load, pool in got.pools.items():
        assert 1 <= len(pool.runs) <= s.repeats
        # a load ran again only while it was undecided, and one that used every run may be undecided
        assert (len(pool.runs) == s.repeats) >= (load in got.undecided)
    assert got.attainment_at_max_load == pytest.approx(got.pools[got.max_load].attainment)
    assert got.attainment_at_max_load >= s.target


def test_a_load_is_repeated_while_its_interval_straddles_the_target_then_the_pool_decides() -> None:
    # exactly 54 of 60 (90%) at load 2: never excluded from the target; everything else far from it
    def probe(load: float) -> ProbeResult:
        calls.append(load)
        return ProbeResult(60 if load < 2 else 54 if load == 2 else 0, 60)

    calls: list[float] = []
    got = search(probe, SearchSettings(repeats=4, resolution=0.5, bisect_runs=1), clock=lambda: 0.0)
    assert calls.count(2.0) == 4 and got.undecided == [2.0]
    assert all(calls.count(x) == 1 for x in calls if x != 2.0)
    assert got.max_load >= 2.0  # 54/60 pooled = 90% meets a 90% target
    assert "within noise of the target" in got.describe()


def test_each_load_of_the_bisection_runs_at_least_bisect_runs_times_and_a_moving_cliff_is_seen() -> None:
    """A cliff that moves from run to run (a loaded machine): between loads 2 and 3 one run meets 100%, the next
    0%. Every single run looks decided (0/60 or 60/60); only a second run at a load shows the disagreement."""

    def cliff() -> tuple[list[float], object]:
        flips, calls = iter([60, 0] * 20), []

        def probe(load: float) -> ProbeResult:
            calls.append(load)
            return ProbeResult(60 if load < 2 else next(flips) if load < 3 else 0, 60)
        return calls, probe

    calls, probe = cliff()
    got = search(probe, SearchSettings(resolution=0.2, bisect_runs=2, repeats=4), clock=lambda: 0.0)
    assert calls[:3] == [1.0, 2.0, 4.0]  # doubling: one run each, their intervals exclude the target
    # bisection: two runs at least; at 2.5 the runs disagree (0, 60, 0): the dispersion widens the interval and a
    # third is run; at 2.25 (60, 0, 60, 0) four, until the widened interval falls below the target
    assert [len(got.pools[x].runs) for x in (3.0, 2.5, 2.25)] == [2, 3, 4]
    assert got.dispersion == 84.0 and (got.max_load, got.bracket_high) == (2.0, 2.25)
    calls, probe = cliff()
    once = search(probe, SearchSettings(resolution=0.2, bisect_runs=1), clock=lambda: 0.0)
    assert once.dispersion == 1.0 and len(calls) == len(set(calls))  # one run a load: the moving cliff unseen


def test_no_repeat_when_the_confidence_is_zero() -> None:
    cell = Cell(capacity=3.0, tau=0.05, seed=3)
    got = searched(cell, SearchSettings(confidence=0.0, bisect_runs=1))
    assert len(set(cell.loads)) == len(cell.loads) == len(got.probes) and not got.undecided


# --- the statistics --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("met", "n"), [(54, 60), (0, 10), (10, 10), (171, 180), (3, 7)])
def test_wilson_is_scipys_wilson_interval(met: int, n: int) -> None:
    expected = stats.binomtest(met, n).proportion_ci(0.9, method="wilson")
    assert wilson(met / n, n, 0.9) == pytest.approx((expected.low, expected.high))
    assert wilson(met / n, n, 0.0) == (met / n, met / n)


def test_wilson_refuses_a_proportion_outside_zero_one() -> None:
    with pytest.raises(ValueError, match="proportion in"):
        wilson(1.2, 10, 0.9)


def test_the_dispersion_is_the_quasi_binomial_one_and_never_below_one() -> None:
    # runs as the binomial says: 1
    assert dispersion({1.0: Pool([(54, 60), (54, 60)])}) == 1.0
    # 57/60 and 45/60: pooled 0.85; chi-square = 2 × 6² / (60 × 0.85 × 0.15) on 1 degree of freedom
    assert dispersion({1.0: Pool([(57, 60), (45, 60)])}) == pytest.approx(72 / 7.65)
    # a load with one run, or all met, says nothing
    assert dispersion({1.0: Pool([(30, 60)]), 2.0: Pool([(60, 60), (60, 60)])}) == 1.0


def test_runs_that_vary_more_than_the_binomial_widen_the_interval_and_are_repeated() -> None:
    # alternately 57/60 and 45/60 at load 2 (pooled 85%): the dispersion grows to 6.3, so the load keeps straddling
    # where two runs as far apart under the binomial (57 and 45 of 60 with phi = 1) would have been decided
    flip = iter([57, 45, 57, 45])

    def probe(load: float) -> ProbeResult:
        return ProbeResult(60 if load < 2 else next(flip) if load == 2 else 0, 60)

    got = search(probe, SearchSettings(start=2.0, repeats=4, resolution=0.5), clock=lambda: 0.0)
    # four runs, each 6 requests off the pooled 51, on 3 degrees of freedom
    assert len(got.pools[2.0].runs) == 4 and got.dispersion == pytest.approx(4 * 36 / 7.65 / 3)
    _, hi = wilson(0.85, 120, 0.9)  # the binomial interval after two runs excludes the target already
    assert hi < TARGET
    assert got.bracket_high == 2.0  # pooled 85% < 90%


# --- limits and bad input ------------------------------------------------------------------------------------------


def test_the_budget_is_respected_and_the_answer_says_it_did_not_converge() -> None:
    cell = Cell(capacity=9.0, seconds=30.0)
    got = searched(cell, SearchSettings(budget_s=100.0, resolution=0.01))
    assert not got.converged and "budget" in got.why
    assert cell.now <= 100.0  # no probe started that would have run past the budget
    assert got.max_load <= cell.capacity <= got.bracket_high or math.isinf(got.bracket_high)
    assert got.section()["converged"] is False and got.section()["why"] == got.why


def test_above_max_load_the_capacity_is_at_least_max_load() -> None:
    got = searched(Cell(capacity=1000.0), SearchSettings(max_load=8.0))
    assert not got.converged and got.max_load == 8.0 and "at least" in got.why
    assert got.section()["bracket_high"] == 8.0  # a finite number in the record


def test_below_min_load_there_is_no_capacity() -> None:
    got = searched(Cell(capacity=0.01), SearchSettings(min_load=0.25))
    assert not got.converged and got.max_load == 0.0 and got.bracket_high == 0.25
    assert got.max_request_rate == 0.0


def test_a_start_that_misses_searches_down() -> None:
    cell = Cell(capacity=0.7, n=10**9)
    got = searched(cell)
    assert got.converged and got.max_load <= cell.capacity <= got.bracket_high and got.max_load < 1


def test_the_section_has_the_catalogue_names() -> None:
    from batchperf.measure.catalogue import CATALOGUE

    # a slope measured and a reference run: every entry is written
    section = searched(Cell(capacity=3.0, slope=1.0, reference=20.0)).section()
    numbers = {k for k, v in section.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    assert numbers == {m.name for m in CATALOGUE if m.section == "capacity"}


@pytest.mark.parametrize(("field", "value", "match"), [
    ("target", 0.0, "target attainment"), ("resolution", -0.1, "resolution"), ("start", math.nan, "start"),
    ("budget_s", math.inf, "budget_s"), ("confidence", 1.0, "confidence"), ("repeats", 0, "repeats"),
    ("repeats", 2.5, "repeats"), ("start", 100.0, "must lie in"), ("bisect_runs", 5, "bisect_runs"),
])
def test_bad_settings_are_refused_naming_the_field(field: str, value: float, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SearchSettings(**{field: value})


@pytest.mark.parametrize(("met", "offered", "match"), [(61, 60, "met requests"), (-1, 60, "met requests"),
                                                       (0, 0, "offer a whole number"), (1.5, 60, "met requests")])
def test_a_probe_with_impossible_counts_is_refused(met: int, offered: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ProbeResult(met, offered)


def test_the_slope_near_the_bracket_and_the_binomial_spread_are_measured_from_the_search() -> None:
    cell = Cell(capacity=13.0, slope=1.0, n=10**7)  # ten million requests a run: the curve itself
    got = searched(cell)
    assert got.slope == pytest.approx(1.0, rel=0.05)
    assert got.requests_at_max_load == 10**7 * len(got.pools[got.max_load].runs)
    assert got.binomial_spread == pytest.approx(binomial_spread(TARGET, got.requests_at_max_load, got.slope))
    assert got.section()["slope"] == got.slope and got.section()["binomial_spread"] == got.binomial_spread
    assert 2 * math.sqrt(2) * got.binomial_spread <= 0.05
    assert "binomial spread" in got.describe() and "expected spread" in got.describe()


def test_a_cliff_is_steep_and_ends_within_noise_claim_no_slope() -> None:
    # a step: 100% up to 2, 0% above (a CPU engine that collapses once overloaded): the spread is far within 5%
    got = search(lambda load: ProbeResult(60 if load <= 2 else 0, 60), clock=lambda: 0.0)
    assert got.slope == pytest.approx(1.0 / got.width) and got.binomial_spread < 0.05 / 10
    # ends out of order (the noise larger than the fall across the bracket): no slope, no spread claimed
    assert bracket_slope({1.0: Pool([(50, 60)]), 1.05: Pool([(55, 60)])}, 1.0, 1.05) is None
    assert bracket_slope({1.0: Pool([(50, 60)])}, 1.0, 1.05) is None
    assert bracket_slope({1.0: Pool([(57, 60)]), 1.05: Pool([(51, 60)])}, 1.0, 1.05) == pytest.approx(0.1 / 0.05)


# --- issue 41: a reference in each probe's process, and a spread that covers what moves between searches ---------


def test_the_search_spread_adds_its_terms_in_quadrature() -> None:
    # binomial 1%, a bracket 4% wide (uniform: 0.04 / sqrt(12) = 1.155%), drift 5%, floor 4%:
    # sqrt(0.0001 + 0.000133 + 0.0025 + 0.0016) = sqrt(0.0043333) = 6.583%
    assert search_spread(0.01, 0.04, 0.05, 0.04) == pytest.approx(0.065828, abs=1e-6)
    assert search_spread(0.0, 0.0, 0.0, 0.04) == pytest.approx(0.04)  # the floor alone
    for name in ("binomial", "width", "reference", "floor"):
        with pytest.raises(ValueError, match=name):
            search_spread(**{"binomial": 0.0, "width": 0.0, "reference": 0.0, "floor": 0.0, name: -0.01})


def test_the_drift_is_the_references_coefficient_of_variation() -> None:
    assert drift([10.0, 9.0]) == pytest.approx(0.5 / 9.5)  # mean 9.5, population sd 0.5
    assert drift([10.0, 10.0, 10.0, 7.0]) == pytest.approx(math.sqrt(6.75 / 4) / 9.25)  # 14.04%
    assert drift([10.0]) == drift([]) == 0.0


def test_the_ratio_error_is_the_standard_error_of_their_mean() -> None:
    # 0.36, 0.40, 0.44: mean 0.40, sample sd 0.04, over sqrt(3): 0.02309 / 0.40 = 5.77%
    assert ratio_error([0.36, 0.40, 0.44]) == pytest.approx(0.04 / math.sqrt(3) / 0.40)
    assert ratio_error([0.4]) == 0.0


class Machine:
    """A cliff at ``capacity × speed`` (100% met below it, none above, 10⁴ requests a run), an offered rate of 4 req/s
    per unit of load, and a reference that serves ``30 × speed`` req/s; ``speed`` drops to ``slower`` from probe
    ``after`` on (the machine slowing mid-search)."""

    def __init__(self, capacity: float = 5.0, slower: float = 1.0, after: int = 0) -> None:
        self.capacity, self.slower, self.after, self.calls = capacity, slower, after, 0

    def __call__(self, load: float) -> ProbeResult:
        self.calls += 1
        speed = self.slower if self.calls > self.after else 1.0
        met = 10_000 if load <= self.capacity * speed else 0
        return ProbeResult(met, 10_000, request_rate=4.0 * load, reference_rate=30.0 * speed)


def test_a_machine_slower_mid_search_gives_the_same_relative_capacity() -> None:
    steady = search(Machine(), SearchSettings(start=4.0), clock=lambda: 0.0)
    slow = search(Machine(slower=0.9), SearchSettings(start=4.0), clock=lambda: 0.0)
    slowing = search(Machine(slower=0.9, after=3), SearchSettings(start=4.0), clock=lambda: 0.0)
    # the absolute capacity follows the machine: 10% slower, ~10% less
    assert slow.max_load / steady.max_load == pytest.approx(0.9, abs=0.05)
    # the relative one does not, slowing mid-search or not (each within the resolution of the truth: 4 × 5 / 30)
    for got in (steady, slow, slowing):
        assert got.relative_capacity == pytest.approx(4 * 5.0 / 30, rel=0.05)
        assert got.reference_rate is not None and got.converged
    assert steady.reference_drift == slow.reference_drift == 0.0
    # the slowing run measured its drift, and its absolute spread says so; the relative one leaves it out
    refs = slowing.references
    assert 30.0 in refs and 27.0 in refs and slowing.reference_drift == pytest.approx(drift(refs))
    assert slowing.reference_drift > 0.02
    width, binomial = slowing.width, slowing.binomial_spread or 0.0
    assert slowing.spread == pytest.approx(search_spread(binomial, width, slowing.reference_drift, ABSOLUTE_FLOOR))
    ratios = slowing.ratios  # each run at the capacity load over its own reference: equal here, no error
    assert slowing.relative_spread == pytest.approx(search_spread(binomial, width, ratio_error(ratios), RELATIVE_FLOOR))
    section = slowing.section()
    assert section["relative_capacity"] == slowing.relative_capacity and section["spread"] == slowing.spread
    assert "relative capacity" in slowing.describe() and "reference drift" in slowing.describe()


def test_without_a_reference_no_relative_figure_is_claimed() -> None:
    got = search(lambda load: ProbeResult(60 if load <= 2 else 0, 60, 4.0 * load), clock=lambda: 0.0)
    assert got.relative_capacity is None and got.relative_spread is None
    assert "relative_capacity" not in got.section() and got.section()["spread"] == got.spread >= ABSOLUTE_FLOOR


def test_a_bad_reference_rate_is_refused_naming_the_field() -> None:
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="reference_rate"):
            ProbeResult(1, 2, 1.0, bad)
