"""The capacity search against simulated cells (tests/support/capacity_cells.py): a known capacity, request
outcomes drawn from a known attainment curve (seeded), a fake clock. The rates below are properties of the
algorithm, measured over seeded searches, with no timing in them."""

from __future__ import annotations

import math
import statistics

import pytest
from capacity_cells import Cell
from hypothesis import given, settings
from hypothesis import strategies as st

from batchperf.capacity.fit import Fit
from batchperf.capacity.search import (
    ABSOLUTE_FLOOR,
    MIN_PLACED,
    RELATIVE_FLOOR,
    Capacity,
    ProbeResult,
    SearchSettings,
    search,
    search_spread,
)


def searched(cell: Cell, s: SearchSettings | None = None) -> Capacity:
    return search(cell, s or SearchSettings(), clock=cell.clock)


def study(searches: int, s: SearchSettings, **cell) -> tuple[float, float, float]:
    """Over ``searches`` seeded searches of one cell: the share whose interval holds the true capacity, the mean
    and the sd of the log-ratio estimate / truth."""
    hits, errors = 0, []
    for seed in range(searches):
        c = Cell(seed=seed, **cell)
        got = searched(c, s)
        assert got.interval is not None
        low, high = got.interval
        hits += low <= c.capacity <= high
        errors.append(math.log(got.max_load / c.capacity))
    return hits / searches, statistics.fmean(errors), statistics.stdev(errors)


# --- the estimate is right, and its interval holds the truth as often as it says -------------------------------

# 60 requests a run (the CPU sustained fixture), 30 probes at most (300 s of 10-s probes), a run-to-run shift of
# 5 points on top of the binomial; measured on these 60 searches each (logistic / linear): coverage 91.7% / 100%,
# bias -1.5% / -0.3%, sd 3.2% / 2.3% of the capacity; over 200: 92.5% / 100% (docs/traffic.md, "The estimator")
STUDY = SearchSettings(start=8.0, budget_s=300.0)


@pytest.mark.parametrize("shape", ["logistic", "linear"])
def test_over_many_searches_the_90_interval_holds_the_capacity_90_percent_and_the_bias_is_small(shape: str) -> None:
    coverage, bias, sd = study(60, STUDY, capacity=13.0, slope=3.0, tau=0.05, shape=shape)
    assert coverage >= 0.90, coverage
    assert abs(bias) <= 0.02 and sd <= 0.05, (bias, sd)


def speed_study(searches: int, reference: float | None) -> tuple[float, float, float]:
    """As :func:`study`, each probe's process at its own speed (sd 6%, elasticity 2) and its reference round 5%
    noisy, the truth the capacity at the probes' mean speed (what a search on that machine can know)."""
    hits, errors = 0, []
    for seed in range(searches):
        c = Cell(seed=seed, capacity=5.0, slope=0.5, tau=0.01, shape="logistic", reference=reference, speed_sd=0.06,
                 reference_noise=0.05)
        got = searched(c, STUDY)
        assert got.interval is not None
        hits += got.interval[0] <= c.searched_capacity <= got.interval[1]
        errors.append(math.log(got.max_load / c.searched_capacity))
    return hits / searches, statistics.fmean(errors), statistics.stdev(errors)


def test_each_probes_reference_takes_its_processs_speed_out_of_the_fit() -> None:
    # the CPU cell's shallow slope (0.3-0.6: docs/traffic.md) and its processes' speeds (studies/capacity-repeat);
    # measured on these 30 searches each: with the references coverage 96.7%, bias -1.5%, sd 1.3%; without them
    # (the speed only widens the binomial) 76.7%, -3.2%, 2.2% (40 each, 7 s more in CI: 92.5%, -1.6%, 1.5%; 80.0%,
    # -3.1%, 2.0%)
    with_speed = speed_study(30, reference=20.0)
    blind = speed_study(30, reference=None)
    assert with_speed[0] >= 0.90 and abs(with_speed[1]) <= 0.02, with_speed
    assert with_speed[2] < blind[2] and abs(with_speed[1]) < abs(blind[1]), (with_speed, blind)
    c = Cell(seed=0, capacity=5.0, slope=0.5, reference=20.0, speed_sd=0.06)
    got = searched(c, STUDY)
    assert got.fit is not None and got.fit.speed_effect is not None and got.fit.speed_effect > 0
    assert got.section()["speed_effect"] == got.fit.speed_effect and "speed taken out" in got.describe()
    assert searched(Cell(capacity=5.0, slope=0.5, reference=20.0), STUDY).fit.speed_effect is None  # all equal


def test_the_offered_rate_at_the_capacity_is_its_nearest_probes_not_every_probes() -> None:
    # the sustained fixture's rate per unit of load is a sawtooth (its batch tenant's on/off periods do not scale
    # with the load): 3.7 just below load 5.33, 5.5 just above; the bracket's far probes sit on other teeth
    per_load = {2.0: 3.85, 4.0: 4.43, 8.0: 4.43, 5.31: 3.70, 5.34: 5.53, 5.36: 5.52}
    runs = tuple((load, ProbeResult(54, 60, rate * load)) for load, rate in per_load.items())
    fitted = Fit(5.342, 5.2, 5.5, 0.9, 50.0, 1.0, 4, 0.9)
    got = Capacity(SearchSettings(), runs, fitted, "budget")
    assert got.rate_per_load == pytest.approx(5.53)  # 5.34 is nearest 5.342; the median of all six read 4.43
    assert got.max_request_rate == pytest.approx(5.342 * 5.53)
    tied = Capacity(SearchSettings(), (*runs, (5.34, ProbeResult(50, 60, 5.51 * 5.34))), fitted, "budget")
    assert tied.rate_per_load == pytest.approx((5.53 + 5.51) / 2)  # two probes at the nearest load: their median


def test_without_noise_the_search_converges_on_the_capacity_within_the_resolution() -> None:
    cell = Cell(capacity=3.1, n=10**9)  # a billion requests a run: the binomial is the true attainment
    got = searched(cell)
    assert got.converged and got.stopped == "resolution" and got.why == ""
    assert got.interval is not None and got.interval[0] <= 3.1 <= got.interval[1]
    assert got.fit is not None and got.fit.width <= 0.05
    assert got.max_load == pytest.approx(3.1, rel=0.01)
    assert got.runs[0][0] == 1.0  # started at the stated load


def test_after_the_bracket_the_probes_concentrate_at_the_crossing() -> None:
    cell = Cell(capacity=13.0, slope=3.0, seed=4)
    got = searched(cell, SearchSettings(start=1.0, budget_s=300.0))
    loads = [load for load, _ in got.runs]
    assert loads[:5] == [1.0, 2.0, 4.0, 8.0, 16.0]  # doubling until 16 missed
    placed = loads[5:]
    assert len(placed) >= MIN_PLACED
    near = [x for x in placed if abs(math.log(x / 13.0)) <= 0.05]
    assert len(near) >= 0.8 * len(placed), placed  # bisection would have spent half its probes at 8-12
    assert all(x == float(f"{x:.3g}") for x in placed)  # three significant figures: close probes share a load


def test_a_slower_cell_reads_a_lower_capacity_and_a_lower_request_rate() -> None:
    # issue 57: a 10% slowdown read a capacity 6% higher and a request rate 6.5% lower; both follow the cell now
    fast = searched(Cell(capacity=13.0, n=10**6))
    slow = searched(Cell(capacity=11.7, n=10**6))
    assert slow.max_load / fast.max_load == pytest.approx(0.9, abs=0.01)
    assert slow.max_request_rate / fast.max_request_rate == pytest.approx(0.9, abs=0.01)
    assert fast.max_request_rate == pytest.approx(4.0 * fast.max_load)  # the cell offers 4 req/s per unit of load


@given(st.floats(0.6, 20), st.integers(0, 10_000))
@settings(max_examples=20, deadline=None)
def test_every_search_obeys_its_rules(capacity: float, seed: int) -> None:
    s = SearchSettings(budget_s=200.0)
    cell = Cell(capacity=capacity, seed=seed)
    got = searched(cell, s)
    assert got.stopped in ("resolution", "budget")
    assert [load for load, _ in got.runs] == cell.loads
    assert all(s.min_load <= x <= s.max_load for x in cell.loads)
    assert got.fit is not None and got.fit.low <= got.max_load <= got.fit.high
    assert got.converged == (got.fit.width <= s.resolution)
    assert cell.now <= s.budget_s + cell.seconds


# --- limits and bad input ------------------------------------------------------------------------------------------


def test_the_budget_is_respected_and_the_answer_says_it_did_not_converge() -> None:
    cell = Cell(capacity=9.0, seconds=30.0, tau=0.1)
    got = searched(cell, SearchSettings(budget_s=150.0, resolution=0.01))
    assert not got.converged and got.stopped == "budget" and "budget" in got.why
    assert cell.now <= 150.0  # no probe started that would have run past the budget
    section = got.section()
    assert section["converged"] is False and section["why"] == got.why and section["stopped"] == "budget"
    assert "NOT converged" in got.describe()


def test_above_max_load_the_capacity_is_at_least_max_load() -> None:
    got = searched(Cell(capacity=1000.0), SearchSettings(max_load=8.0))
    assert not got.converged and got.stopped == "max_load" and got.max_load == 8.0 and "at least" in got.why
    assert got.fit is None and "interval_high" not in got.section() and "spread" not in got.section()


def test_below_min_load_there_is_no_capacity() -> None:
    got = searched(Cell(capacity=0.01), SearchSettings(min_load=0.25))
    assert not got.converged and got.stopped == "min_load" and got.max_load == 0.0
    assert got.max_request_rate == 0.0


def test_a_start_that_misses_searches_down() -> None:
    cell = Cell(capacity=0.7, n=10**9)
    got = searched(cell)
    assert got.converged and got.runs[1][0] == 0.5 and got.max_load == pytest.approx(0.7, rel=0.02)


def test_the_section_has_the_catalogue_names() -> None:
    from batchperf.measure.catalogue import CATALOGUE, LEGACY_CAPACITY

    # references that move from probe to probe: the fit's speed effect is stored too
    section = searched(Cell(capacity=3.0, slope=1.0, reference=20.0, speed_sd=0.05)).section()
    numbers = {k for k, v in section.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    assert numbers == {m.name for m in CATALOGUE if m.section == "capacity" and m.path not in LEGACY_CAPACITY}


@pytest.mark.parametrize(("field", "value", "match"), [
    ("target", 0.0, "target attainment"), ("target", 1.0, "target attainment"), ("resolution", -0.1, "resolution"),
    ("start", math.nan, "start"), ("budget_s", math.inf, "budget_s"), ("confidence", 1.0, "confidence"),
    ("confidence", 0.0, "confidence"), ("start", 100.0, "must lie in"),
])
def test_bad_settings_are_refused_naming_the_field(field: str, value: float, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SearchSettings(**{field: value})


@pytest.mark.parametrize(("met", "offered", "match"), [(61, 60, "met requests"), (-1, 60, "met requests"),
                                                       (0, 0, "offer a whole number"), (1.5, 60, "met requests")])
def test_a_probe_with_impossible_counts_is_refused(met: int, offered: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ProbeResult(met, offered)


def test_a_bad_reference_rate_is_refused_naming_the_field() -> None:
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="reference_rate"):
            ProbeResult(1, 2, 1.0, bad)


def test_an_unknown_stop_is_refused() -> None:
    with pytest.raises(ValueError, match="stopped must be one of"):
        Capacity(SearchSettings(), (), None, "tired")


# --- the spread a search states, and the reference pooled over the search -----------------------------------------


def test_the_search_spread_adds_its_terms_in_quadrature() -> None:
    # fit 3%, reference 2%, floor 4%: sqrt(0.0009 + 0.0004 + 0.0016) = 5.385%
    assert search_spread(0.03, 0.02, 0.04) == pytest.approx(math.sqrt(0.0029))
    assert search_spread(0.0, 0.0, 0.04) == pytest.approx(0.04)  # the floor alone
    for name in ("fit_sd", "reference", "floor"):
        with pytest.raises(ValueError, match=name):
            search_spread(**{"fit_sd": 0.0, "reference": 0.0, "floor": 0.0, name: -0.01})


def test_the_spreads_are_the_fits_sd_with_the_floors_and_the_pooled_references_error() -> None:
    got = searched(Cell(capacity=3.0, slope=1.0, reference=20.0))
    assert got.fit is not None
    assert got.spread == pytest.approx(search_spread(got.fit.sd, 0.0, ABSOLUTE_FLOOR))
    # every probe's reference is 20 req/s: no error, the relative spread is the fit's and its floor
    assert got.relative_spread == pytest.approx(search_spread(got.fit.sd, 0.0, RELATIVE_FLOOR))
    assert got.reference_rate == 20.0 and got.relative_capacity == pytest.approx(got.max_request_rate / 20.0)


class Machine:
    """A cell whose capacity and reference both scale with the machine's ``speed``; each probe's reference round
    is noisy (±10%, seeded), as the CPU tier's 2-s saturated round is (studies/capacity-repeat: ±9–13%)."""

    def __init__(self, speed: float = 1.0, seed: int = 0) -> None:
        self.cell = Cell(capacity=5.0 * speed, n=10**6, seed=seed)
        self.speed = speed
        self.noise = Cell(capacity=1.0, seed=seed + 1).rng

    def __call__(self, load: float) -> ProbeResult:
        got = self.cell(load)
        reference = 30.0 * self.speed * float(self.noise.normal(1.0, 0.10))
        return ProbeResult(got.met, got.offered, got.request_rate, reference)


def test_the_reference_pooled_over_the_search_cancels_the_machines_speed() -> None:
    fast = search(Machine(), SearchSettings(start=4.0), clock=lambda: 0.0)
    slow = search(Machine(speed=0.9), SearchSettings(start=4.0), clock=lambda: 0.0)
    assert slow.max_load / fast.max_load == pytest.approx(0.9, abs=0.02)  # the absolute capacity follows the machine
    # the relative one does not: pooled over the probes, each reference's 10% noise falls by their square root
    truth = 4.0 * 5.0 / 30.0
    for got in (fast, slow):
        assert got.relative_capacity == pytest.approx(truth, rel=0.10 / math.sqrt(len(got.runs)) * 2.5)
        assert got.reference_drift == pytest.approx(0.10, abs=0.06)
        refs = got.references
        error = statistics.stdev(refs) / math.sqrt(len(refs)) / statistics.fmean(refs)
        assert got.relative_spread == pytest.approx(search_spread(got.fit.sd, error, RELATIVE_FLOOR))
    assert "relative capacity" in fast.describe() and "pooled over" in fast.describe()


def test_without_a_reference_no_relative_figure_is_claimed() -> None:
    got = searched(Cell(capacity=2.0))
    assert got.relative_capacity is None and got.relative_spread is None and got.reference_rate is None
    assert "relative_capacity" not in got.section() and got.section()["spread"] == got.spread >= ABSOLUTE_FLOOR
