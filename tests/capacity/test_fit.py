"""The capacity estimator: a logistic curve of attainment against log-load fitted to every probe's requests, its
crossing of the target and the crossing's quasi-likelihood profile interval (batchperf.capacity.fit)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special, stats

from batchperf.capacity.fit import SLOPE_BOUNDS, Outcomes, fit, outcomes_of

RANGE = (1 / 64, 64.0)


def curve(capacity: float, steepness: float, loads: list[float], n: int) -> Outcomes:
    """Outcomes exactly on a logistic curve (met rounded from n × p)."""
    met = [round(n * float(special.expit(special.logit(0.9) - steepness * math.log(x / capacity)))) for x in loads]
    return outcomes_of([(x, m, n) for x, m in zip(loads, met, strict=True)])


def test_on_the_curve_itself_the_crossing_and_the_steepness_are_recovered() -> None:
    got = fit(curve(3.1, 30.0, [2.0, 2.8, 3.0, 3.2, 3.4, 4.0], 10**7), 0.9, 0.9, RANGE)
    assert got.capacity == pytest.approx(3.1, rel=1e-3) and got.steepness == pytest.approx(30.0, rel=1e-2)
    assert got.low < 3.1 < got.high and got.width < 0.001  # ten million requests a probe: a narrow interval
    assert got.dispersion == pytest.approx(1.0) and got.df == 4
    assert got.attainment(3.1) == pytest.approx(0.9) and got.slope == pytest.approx(30.0 * 0.09)


def test_a_cliff_is_held_by_the_steepness_bound_and_its_interval_is_the_gap() -> None:
    # 100% up to 2, 0% from 2.2 (a CPU engine that collapses once overloaded): the likelihood has no maximum in the
    # steepness, and every crossing between the two is as likely: the interval is the gap, as bisection's bracket
    got = fit(outcomes_of([(1.0, 60, 60), (2.0, 60, 60), (2.2, 0, 60), (4.0, 0, 60)]), 0.9, 0.9, RANGE)
    assert 2.0 <= got.capacity <= 2.2 and got.steepness > 100
    assert 1.95 < got.low <= 2.01 and 2.18 <= got.high < 2.25


def test_probes_that_vary_more_than_the_binomial_widen_the_interval() -> None:
    # the same loads and the same pooled counts: once as the binomial says, once alternating 57 and 45 of 60
    loads = [1.0, 2.0, 2.0, 2.0, 2.0, 4.0]
    even = fit(outcomes_of(list(zip(loads, [60, 51, 51, 51, 51, 0], [60] * 6, strict=True))), 0.9, 0.9, RANGE)
    odd = fit(outcomes_of(list(zip(loads, [60, 57, 45, 57, 45, 0], [60] * 6, strict=True))), 0.9, 0.9, RANGE)
    assert even.dispersion == pytest.approx(1.0) and odd.dispersion > 2.0
    assert odd.capacity == pytest.approx(even.capacity, rel=1e-3)
    assert odd.width > 1.3 * even.width


def test_an_interval_the_data_do_not_close_stops_at_the_load_range() -> None:
    # one probe just met and one just missed, within noise of the target: the crossing may lie anywhere about them
    got = fit(outcomes_of([(1.0, 55, 60), (2.0, 53, 60)]), 0.9, 0.9, (0.9, 2.5))
    assert (got.low, got.high) == pytest.approx((0.9, 2.5))


def test_the_sd_is_read_from_the_interval_on_log_load() -> None:
    got = fit(curve(3.0, 20.0, [2.0, 2.9, 3.1, 4.0], 600), 0.9, 0.9, RANGE)
    assert got.sd == pytest.approx(math.log(got.high / got.low) / (2 * stats.norm.ppf(0.95)))


def test_the_interval_is_the_profile_likelihoods_with_the_dispersion_and_f_cut() -> None:
    """At each end of the interval the profile deviance is phi × F(0.9; 1, df) above its minimum (checked by a
    brute-force grid over the steepness, not the module's own profile)."""
    data = outcomes_of([(1.0, 60, 60), (2.0, 57, 60), (2.2, 50, 60), (2.4, 30, 60), (2.2, 56, 60), (4.0, 0, 60)])
    got = fit(data, 0.9, 0.9, RANGE)
    x, m, n = np.log(data.loads), np.array(data.met), np.array(data.offered)
    steep = np.exp(np.linspace(math.log(SLOPE_BOUNDS[0]), math.log(SLOPE_BOUNDS[1]), 20001))[:, None]

    def profile(theta: float) -> float:
        eta = special.logit(0.9) - steep * (x - theta)
        return float(np.min(-np.sum(m * special.log_expit(eta) + (n - m) * special.log_expit(-eta), axis=1)))

    best = profile(math.log(got.capacity))
    cut = got.dispersion * stats.f.ppf(0.9, 1, got.df)
    for end in (got.low, got.high):
        assert 2 * (profile(math.log(end)) - best) == pytest.approx(cut, rel=0.02)


@pytest.mark.parametrize(("outcomes", "match"), [
    (lambda: Outcomes((1.0, 2.0), (60,), (60, 60)), "as long"),
    (lambda: Outcomes((1.0, 2.0), (61, 0), (60, 60)), "met must lie in"),
    (lambda: Outcomes((1.0, 0.0), (60, 0), (60, 60)), "load"),
    (lambda: outcomes_of([(2.0, 60, 60), (2.0, 0, 60)]), "two loads"),
])
def test_bad_outcomes_are_refused_naming_the_problem(outcomes, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        fit(outcomes(), 0.9, 0.9, RANGE)


def test_bad_targets_and_confidences_are_refused() -> None:
    data = outcomes_of([(1.0, 60, 60), (2.0, 0, 60)])
    with pytest.raises(ValueError, match="target"):
        fit(data, 1.0, 0.9, RANGE)
    with pytest.raises(ValueError, match="confidence"):
        fit(data, 0.9, 0.0, RANGE)
