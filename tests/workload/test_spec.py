"""Workloads: exact lengths, determinism per seed, arrivals, and clear errors."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchperf.workload.spec import Arrival, LengthSpec, WorkloadSpec

lengths = st.integers(min_value=1, max_value=300)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 12), length=lengths, seed=st.integers(0, 2**32 - 1), warm=st.integers(0, 3))
def test_prompts_have_exact_length_and_differ(n: int, length: int, seed: int, warm: int) -> None:
    w = WorkloadSpec(n, LengthSpec(length, length), num_warmup=warm, seed=seed).build(vocab_size=500, max_model_len=4096)
    everything = [*w.warmup, *w.requests]
    assert len(w.requests) == n and len(w.warmup) == warm
    assert all(r.prompt_len == length for r in everything)
    assert all(0 <= t < 500 for r in everything for t in r.prompt_ids)
    assert len({r.prompt_ids for r in everything}) == len(everything)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), lo=st.integers(1, 50), span=st.integers(0, 200))
def test_same_seed_same_workload(seed: int, lo: int, span: int) -> None:
    spec = WorkloadSpec(8, LengthSpec(lo, lo + span), arrival=Arrival("rate", 5.0, 0.5), num_warmup=1, seed=seed)
    a, b = spec.build(1000, 8192), spec.build(1000, 8192)
    assert a == b
    assert all(lo <= r.prompt_len <= lo + span for r in a.requests)


def test_known_seed_gives_known_tokens() -> None:
    """Identical on any machine: PCG64 with a fixed seed is platform-independent."""
    w = WorkloadSpec(1, LengthSpec(5, 5), seed=7).build(1000, 100)
    expected = tuple(int(t) for t in np.random.Generator(np.random.PCG64(7)).integers(0, 1000, size=5))
    assert w.requests[0].prompt_ids == expected


def test_different_seeds_differ() -> None:
    a = WorkloadSpec(4, LengthSpec(16, 16), seed=1).build(1000, 100)
    b = WorkloadSpec(4, LengthSpec(16, 16), seed=2).build(1000, 100)
    assert a.requests != b.requests


def test_targets_alternate_16_and_32_by_default() -> None:
    w = WorkloadSpec(6, LengthSpec(4, 4)).build(100, 100)
    assert [r.target_len for r in w.requests] == [16, 32, 16, 32, 16, 32]


@settings(max_examples=25, deadline=None)
@given(rate=st.floats(0.5, 200), burstiness=st.floats(0.1, 10), n=st.integers(1, 50), seed=st.integers(0, 1000))
def test_rate_arrivals_are_nondecreasing_from_zero(rate: float, burstiness: float, n: int, seed: int) -> None:
    offsets = Arrival("rate", rate, burstiness).offsets(np.random.Generator(np.random.PCG64(seed)), n)
    assert len(offsets) == n and offsets[0] == 0.0
    assert all(b >= a for a, b in zip(offsets, offsets[1:]))


def test_poisson_rate_has_the_right_mean_gap() -> None:
    offsets = Arrival("rate", 10.0, 1.0).offsets(np.random.Generator(np.random.PCG64(0)), 5001)
    assert np.mean(np.diff(offsets)) == pytest.approx(0.1, rel=0.05)


def test_closed_and_burst_send_everything_at_t0() -> None:
    rng = np.random.Generator(np.random.PCG64(0))
    assert Arrival("closed").offsets(rng, 3) == [0.0, 0.0, 0.0]
    assert Arrival("burst").max_in_flight(4, 10) == 10
    assert Arrival("closed").max_in_flight(4, 10) == 4


@pytest.mark.parametrize(
    ("text", "low", "high", "label"),
    [("512", 512, 512, "512"), ("short", 128, 128, "128"), ("long", 2048, 2048, "2048"),
     ("64-512", 64, 512, "mix64-512"), ("64,256,512", 64, 512, "mix64_256_512")],
)
def test_length_specs_parse(text: str, low: int, high: int, label: str) -> None:
    spec = LengthSpec.parse(text)
    assert (spec.low, spec.high, spec.label) == (low, high, label)


def test_list_mix_draws_only_listed_lengths() -> None:
    w = WorkloadSpec(30, LengthSpec.parse("8,16,24"), seed=3).build(100, 100)
    assert {r.prompt_len for r in w.requests} <= {8, 16, 24}
    assert len({r.prompt_len for r in w.requests}) > 1


@pytest.mark.parametrize(("text", "message"), [("-5", "must be >= 1"), ("0", "must be >= 1"),
                                               ("abc", "bad prompt length"), ("300-20", "low > high")])
def test_bad_lengths_are_named(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LengthSpec.parse(text)


def test_prompt_longer_than_context_is_rejected() -> None:
    with pytest.raises(ValueError, match="exceeds the model's context of 256"):
        WorkloadSpec(1, LengthSpec(250, 250)).build(vocab_size=100, max_model_len=256)


def test_empty_workload_is_rejected() -> None:
    with pytest.raises(ValueError, match="num_prompts must be >= 1"):
        WorkloadSpec(0, LengthSpec(4, 4))


@pytest.mark.parametrize("kwargs", [dict(kind="rate", rate=0.0), dict(kind="rate"), dict(kind="poisson"),
                                    dict(kind="rate", rate=1.0, burstiness=0)])
def test_bad_arrivals_are_rejected(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        Arrival(**kwargs)


def test_default_warmup_is_five_percent_rounded_up() -> None:
    assert WorkloadSpec.default_warmup(16) == 1
    assert WorkloadSpec.default_warmup(256) == 13
