"""A capacity probe's counts: requests met and offered, pooled over the probe's rounds from its raw traces."""

from __future__ import annotations

import pytest
from gate_samples import cell_info

from batchperf.capacity.record import probe_result
from batchperf.measure.trace import RequestTrace, RunTrace
from batchperf.results.record import ResultsError


def request(i: int, ttft: float, tenant: str = "interactive") -> RequestTrace:
    return RequestTrace(i, 10, 2, 0.0, 0.0, (ttft, ttft + 0.01), sent=0.0, tenant=tenant)


def probe(*rounds: list[RequestTrace]):
    record = cell_info("cpu-tiny-qwen2-continuous-bs4-p64-c64-wtenants-x-load2")
    record.workload = {"kind": "tenants", "slos": {"interactive": {"ttft_ms": 200, "tpot_ms": None, "e2el_ms": None},
                                                   "batch": {"ttft_ms": None, "tpot_ms": None, "e2el_ms": 5000}}}
    record.tenants = {"interactive": {"offered": 3, "met": 2}, "batch": {"offered": 1, "met": 1}}
    record.slo = {"attainment": 0.75, "offered": 4, "met": 3}
    record.traces = [RunTrace("continuous", 4, 64, list(r), end=1.0).to_dict() for r in rounds]
    return record


def test_the_rounds_are_pooled_each_request_judged_against_its_tenants_slo() -> None:
    # round 1: interactive 0.1 s (met), 0.3 s (missed), 0.1 s (met); batch met. Round 2: one interactive request
    # never came back (offered, a miss), the batch one met: 3 + 2 of 8 offered
    one = [request(0, 0.1), request(1, 0.3), request(2, 0.1), request(3, 4.0, "batch")]
    two = [request(0, 0.1), request(1, 0.1), request(3, 0.5, "batch")]
    got = probe_result(probe(one, two))
    assert (got.met, got.offered) == (6, 8)
    assert got.request_rate == pytest.approx(4 / 1.0)  # slo.offered / metrics.duration of the cell


def test_without_traces_the_slo_sections_one_round_counts() -> None:
    record = probe()
    record.traces = []
    got = probe_result(record)
    assert (got.met, got.offered) == (3, 4)


def test_a_probe_without_slo_counts_is_refused_naming_the_fix() -> None:
    record = probe()
    record.slo = {"attainment": 0.75}
    with pytest.raises(ResultsError, match="no slo.offered / slo.met"):
        probe_result(record)


def arriving(*times: float) -> list[RequestTrace]:
    return [RequestTrace(i, 10, 2, t, t, (t + 0.1, t + 0.2), sent=t, tenant="interactive") for i, t in enumerate(times)]


def test_the_offered_rate_is_over_the_arrival_span_the_drain_excluded() -> None:
    """Issue 57: offered ÷ the run's duration counted the drain, so a slower engine read a lower offered rate at the
    same load. Arrivals 0, 0.5, 1.0, 1.5 s: 3 gaps in 1.5 s, 2 req/s, whenever the last request finishes."""
    record = probe(arriving(0.0, 0.5, 1.0, 1.5))
    record.metrics = {**record.metrics, "duration": 9.0}  # a long drain after the last arrival
    assert probe_result(record).request_rate == pytest.approx(2.0)
    # two rounds: the mean of their rates (2 and 4 req/s)
    assert probe_result(probe(arriving(0.0, 0.5, 1.0, 1.5), arriving(0.0, 0.25, 0.5, 0.75))).request_rate == 3.0


def test_without_an_arrival_span_the_duration_is_used() -> None:
    # every request released at once (the saturated reference's pattern): no span to measure
    record = probe(arriving(0.0, 0.0, 0.0, 0.0))
    assert probe_result(record).request_rate == pytest.approx(4 / record.metrics["duration"])


def test_a_search_from_before_issue_57_is_read_and_judged_as_before() -> None:
    """Its bracket, its spread (binomial, width, drift and the 6% floor: ±11.9% in search 1) and the gate's 3 × it:
    search 6 (+13.6%) against search 1 is no change, as it was; half of search 1's capacity is a regression."""
    from paths import REPO

    from batchperf.regress.gate import compare_cell
    from batchperf.regress.verdict import Verdict
    from batchperf.results.io import read_results

    data = REPO / "studies" / "capacity-repeat" / "data"
    one, six = (read_results(data / f"run-{n}.json").records[0] for n in (1, 6))
    assert one.capacity["bracket_high"] == 2.875 and one.capacity["attainment_at_max_load"] > 0.9
    judged = {m.metric: m for m in compare_cell(one.id, one, six).metrics}
    assert judged["capacity.max_load"].verdict is Verdict.NO_CHANGE
    assert judged["capacity.max_load"].tolerance == pytest.approx(3 * one.capacity["spread"])
    halved = read_results(data / "run-6.json").records[0]
    halved.capacity = {**halved.capacity, "max_load": one.capacity["max_load"] / 2}
    assert {m.metric: m for m in compare_cell(one.id, one, halved).metrics}["capacity.max_load"].verdict is \
        Verdict.REGRESSION


def test_a_negative_speed_effect_is_written_and_read_other_capacity_figures_stay_non_negative() -> None:
    # a quiet search on the model 1 host fitted c = -2.37 (its faster processes happened to meet fewer), and the
    # record check, which held every measured number >= 0, refused to write its result: the search's 10 min lost
    from batchperf.capacity.fit import Fit
    from batchperf.capacity.record import capacity_record
    from batchperf.capacity.search import Capacity, ProbeResult, SearchSettings
    from batchperf.results.record import CellRecord

    runs = tuple((load, ProbeResult(54, 60, 4.0 * load, 40.0 + load)) for load in (2.0, 4.0, 3.3, 3.4))
    fitted = Fit(3.35, 3.1, 3.6, 0.9, 10.0, 2.0, 1, 0.9, speed_effect=-2.37)
    record = capacity_record(probe(), Capacity(SearchSettings(), runs, fitted, "budget"))
    again = CellRecord.from_dict(record.to_dict(), where="again")
    assert again.capacity["speed_effect"] == -2.37
    data = record.to_dict()
    data["capacity"] = {**data["capacity"], "max_load": -1.0}
    with pytest.raises(ResultsError, match=r"capacity.max_load is -1.0: a measured value must be a finite number >= 0"):
        CellRecord.from_dict(data, where="bad")
    data["capacity"] = {**data["capacity"], "max_load": 3.35, "speed_effect": float("nan")}
    with pytest.raises(ResultsError, match=r"capacity.speed_effect is nan: a measured value must be a finite number"):
        CellRecord.from_dict(data, where="bad")
