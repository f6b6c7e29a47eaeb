"""The capacity search against fake probes: exact, noisy (seeded), slow (a fake clock), and at its limits."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchperf.measure.capacity import ProbeResult, SearchSettings, search


class Fake:
    """Attainment falls linearly from 1 to 0 over [edge - 0.5, edge + 0.5] (target 0.9 is met up to edge - 0.4),
    plus seeded Gaussian noise; each probe advances a fake clock by ``seconds``."""

    def __init__(self, edge: float, noise: float = 0.0, seed: int = 0, seconds: float = 10.0) -> None:
        self.edge, self.noise, self.rng, self.seconds = edge, noise, random.Random(seed), seconds
        self.now = 0.0
        self.loads: list[float] = []

    def true(self, load: float) -> float:
        return min(1.0, max(0.0, 0.5 - (load - self.edge)))

    def __call__(self, load: float) -> ProbeResult:
        self.loads.append(load)
        self.now += self.seconds
        value = self.true(load) + self.rng.gauss(0, self.noise)
        return ProbeResult(min(1.0, max(0.0, value)), request_rate=4.0 * load)

    def clock(self) -> float:
        return self.now

    @property
    def capacity(self) -> float:  # where the true attainment crosses 0.9
        return self.edge - 0.4


def test_a_noiseless_search_brackets_the_true_edge_within_the_resolution() -> None:
    fake = Fake(edge=3.0)
    got = search(fake, SearchSettings(), clock=fake.clock)
    assert got.converged and got.why == ""
    assert got.max_load <= fake.capacity <= got.bracket_high
    assert got.width <= 0.05
    assert got.max_request_rate == pytest.approx(4.0 * got.max_load)
    assert got.attainment_at_max_load >= 0.9
    assert got.probes[0][0] == 1.0  # started at the stated load


@given(st.floats(0.6, 20), st.integers(0, 10_000))
@settings(max_examples=40, deadline=None)
def test_with_noise_the_bracket_is_no_wider_than_the_resolution_and_near_the_edge(edge: float, seed: int) -> None:
    fake = Fake(edge=edge, noise=0.02, seed=seed)
    got = search(fake, SearchSettings(resolution=0.05), clock=fake.clock)
    assert got.converged
    assert got.bracket_high - got.max_load <= 0.05 * got.max_load
    # noise of 0.02 against a 0.05 margin with a median of 3: the edge found is within 0.1 of the true one
    assert abs(got.max_load - fake.capacity) <= 0.1 + 0.05 * fake.capacity


def test_two_searches_with_other_seeds_agree_within_the_resolution() -> None:
    a = search(f := Fake(edge=4.0, noise=0.02, seed=1), clock=f.clock)
    b = search(g := Fake(edge=4.0, noise=0.02, seed=2), clock=g.clock)
    assert abs(a.max_load - b.max_load) <= 0.05 * max(a.max_load, b.max_load) + 0.1


def test_a_probe_near_the_target_is_repeated_before_the_bracket_moves() -> None:
    fake = Fake(edge=3.0, noise=0.03, seed=7)
    got = search(fake, SearchSettings(margin=0.05, repeats=3), clock=fake.clock)
    first: dict[float, float] = {}
    for load, value in got.probes:
        first.setdefault(load, value)
    near = [load for load, value in first.items() if abs(value - 0.9) <= 0.05]
    assert near, "the search never probed near the edge"
    assert all(2 <= fake.loads.count(load) <= 3 for load in near), "a run within the margin is repeated"
    assert all(fake.loads.count(load) == 1 for load in first if load not in near), "a run far from it is not"
    # the probes at one load are consecutive: the bracket did not move between them
    assert [load for i, load in enumerate(fake.loads) if i == 0 or fake.loads[i - 1] != load] == list(first)


def test_no_repeat_when_margin_is_zero() -> None:
    fake = Fake(edge=3.0)
    got = search(fake, SearchSettings(margin=0.0), clock=fake.clock)
    assert len(set(fake.loads)) == len(fake.loads) == len(got.probes)


def test_the_budget_is_respected_and_the_answer_says_it_did_not_converge() -> None:
    fake = Fake(edge=9.0, seconds=30.0)
    got = search(fake, SearchSettings(budget_s=100.0, resolution=0.01), clock=fake.clock)
    assert not got.converged and "budget" in got.why
    assert fake.now <= 100.0  # no probe started that would have run past the budget
    assert got.max_load <= fake.capacity <= got.bracket_high or math.isinf(got.bracket_high)
    assert got.section()["converged"] is False and got.section()["why"] == got.why


def test_above_max_load_the_capacity_is_at_least_max_load() -> None:
    fake = Fake(edge=1000.0)
    got = search(fake, SearchSettings(max_load=8.0), clock=fake.clock)
    assert not got.converged and got.max_load == 8.0 and "at least" in got.why
    assert got.section()["bracket_high"] == 8.0  # a finite number in the record


def test_below_min_load_there_is_no_capacity() -> None:
    fake = Fake(edge=-5.0)
    got = search(fake, SearchSettings(min_load=0.25), clock=fake.clock)
    assert not got.converged and got.max_load == 0.0 and got.bracket_high == 0.25
    assert got.max_request_rate == 0.0


def test_a_start_that_misses_searches_down() -> None:
    fake = Fake(edge=0.7)
    got = search(fake, clock=fake.clock)
    assert got.converged and got.max_load <= fake.capacity <= got.bracket_high and got.max_load < 1


def test_the_section_has_the_catalogue_names() -> None:
    from batchperf.measure.catalogue import CATALOGUE

    fake = Fake(edge=3.0)
    section = search(fake, clock=fake.clock).section()
    numbers = {k for k, v in section.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    assert numbers == {m.name for m in CATALOGUE if m.section == "capacity"}


@pytest.mark.parametrize(("field", "value", "match"), [
    ("target", 0.0, "target attainment"), ("resolution", -0.1, "resolution"), ("start", math.nan, "start"),
    ("budget_s", math.inf, "budget_s"), ("margin", 1.0, "margin"), ("repeats", 0, "repeats"),
    ("start", 100.0, "must lie in"),
])
def test_bad_settings_are_refused_naming_the_field(field: str, value: float, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SearchSettings(**{field: value})


def test_a_probe_attainment_outside_zero_one_is_refused() -> None:
    with pytest.raises(ValueError, match=r"ratio in \[0, 1\]"):
        ProbeResult(1.5)
