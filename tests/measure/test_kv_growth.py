"""The KV-cache growth fit: slope of measured bytes per request over tokens held vs analytic bytes/token."""

from __future__ import annotations

import pytest

from batchperf.measure.kv_growth import KVGrowth, KVPoint, fit_slope, kv_growth


def rec(model: str, backend: str, tokens: float | None, kv_bytes: float | None, analytic: int = 8192) -> KVPoint:
    return KVPoint(model, backend, tokens if kv_bytes is not None else None, kv_bytes, analytic)


def test_fit_recovers_slope_and_intercept():
    slope, intercept = fit_slope([100, 200, 400], [1000 + 8 * 100, 1000 + 8 * 200, 1000 + 8 * 400])
    assert slope == pytest.approx(8.0) and intercept == pytest.approx(1000.0)
    with pytest.raises(ValueError, match="two or more distinct token counts"):
        fit_slope([64, 64], [1.0, 2.0])
    with pytest.raises(ValueError, match="differ in length"):
        fit_slope([1, 2], [1.0])


def test_dense_cache_agrees_and_a_doubled_cache_is_caught_by_name():
    exact = [rec("m", "hf-static", t, 8192 * t) for t in (79, 271, 527)]
    doubled = [rec("m", "leaky", t, 2 * 8192 * t) for t in (79, 271, 527)]
    fits, skipped = kv_growth(exact + doubled)
    assert skipped == []
    by_backend = {f.backend: f for f in fits}
    assert by_backend["hf-static"].agrees() and by_backend["hf-static"].relative_error == pytest.approx(0, abs=1e-9)
    leaky = by_backend["leaky"]
    assert not leaky.agrees() and leaky.relative_error == pytest.approx(1.0)
    assert leaky.describe() == ("KV-cache growth of m on leaky: slope 16,384.0 B/token over 3 token counts "
                                "(79..527 tokens held) vs analytic 8,192 B/token (+100.00%)")


def test_block_rounding_stays_within_the_default_tolerance():
    # a paged cache of 16-token blocks holds ceil(t / 16) × 16 tokens' worth of bytes
    tokens = [79, 271, 527, 1039]
    fits, _ = kv_growth([rec("m", "paged", t, 8192 * 16 * -(-t // 16)) for t in tokens])
    assert fits[0].agrees() and abs(fits[0].relative_error) > 0


def test_groups_that_cannot_be_fitted_say_why():
    fits, skipped = kv_growth([rec("m", "one", 79, 8192 * 79), rec("m", "one", 79, 8192 * 79),
                               rec("m", "none", None, None)])
    assert fits == []
    assert skipped == ["KV-cache growth of m on none: no measured KV bytes in its cells",
                       "KV-cache growth of m on one: one token count only (79); "
                       "run two or more prompt lengths to fit a slope"]


def test_cells_disagreeing_on_the_analytic_value_are_an_error():
    with pytest.raises(ValueError, match="disagree on analytic"):
        kv_growth([rec("m", "b", 79, 1.0, analytic=8192), rec("m", "b", 271, 2.0, analytic=4096)])


def test_run_name_appears_in_the_description():
    fit = KVGrowth("m", "b", (1.0, 2.0), (2.0, 4.0), 2.0, 0.0, 2.0, run="after")
    assert "on b (after)" in fit.describe() and fit.agrees()


def traffic(tokens: float, kv_tokens: float, workload: str) -> KVPoint:
    """A traffic cell on a paged cache of 2048 B/token: ``kv_tokens`` is its block-rounded mean per request."""
    return KVPoint("m", "continuous", tokens, kv_tokens * 2048, 2048, workload)


def test_a_session_of_traffic_cells_only_is_not_judged_and_says_why():
    # two traffic cells 20 tokens apart, rounded up to 16-token blocks: the slope comes out 20% low (it failed)
    points = [traffic(100, 112, "tenants:t.toml"), traffic(120, 128, "trace:t.jsonl")]
    fits, skipped = kv_growth(points)
    assert fits == []  # not judged, so never a pass (the suite's check skips with this line)
    assert skipped == ["KV-cache growth of m on continuous: 2 traffic cell(s) not judged (tenants:t.toml, "
                       "trace:t.jsonl): their requests mix prompt lengths, so block rounding (or padding) moves "
                       "their bytes per request by up to a block each, more than a slope over their narrow range of "
                       "tokens held can tell from growth; run synthetic cells at two or more prompt lengths to "
                       "judge it"]


def test_traffic_cells_beside_synthetic_ones_are_left_out_of_the_fit():
    points = [traffic(80, 80, ""), traffic(528, 528, ""), traffic(100, 112, "prefix:2:128")]
    fits, skipped = kv_growth(points)
    assert [f.tokens for f in fits] == [(80, 528)] and fits[0].agrees() and fits[0].slope == pytest.approx(2048)
    assert len(skipped) == 1 and "1 traffic cell(s) not judged (prefix:2:128)" in skipped[0]
    assert "run synthetic cells" not in skipped[0]


def test_a_record_says_which_traffic_its_kv_point_came_from():
    from paths import REPO

    from batchperf.results.io import read_many

    records = read_many([REPO / "tests/data/results_cpu_traffic.json", REPO / "tests/data/results_cpu_small.json"])
    kinds = {r.kv_point().workload.partition(":")[0] for f in records for r in f.records}
    assert kinds == {"", "prefix", "tenants", "trace"}
