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
