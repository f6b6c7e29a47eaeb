"""A cell whose client, not its server, set the latency: its latencies are *not judged* (never a pass), its
throughput is judged only when the server was kept saturated (the summary: tests/suite/test_plugin.py, the report:
tests/report/test_page.py)."""

from __future__ import annotations

import pytest
from gate_samples import CLIENT_LAG_REASON as REASON
from gate_samples import cell_info, copied, scaled
from gate_samples import client_bound as bound

from batchperf.regress.gate import compare_cell
from batchperf.regress.verdict import Verdict
from batchperf.results.record import CellRecord, ResultsError


def by_name(verdict):
    return {m.name: m for m in verdict.metrics}


def test_a_client_bound_run_s_latencies_are_not_judged_and_its_saturated_throughput_is() -> None:
    base = cell_info()
    verdict = compare_cell("c", base, bound(scaled(base, 3.0), saturated=True))  # 3x slower: would regress
    metrics = by_name(verdict)
    for name in ("p99_ttft_ms", "p99_tpot_ms", "p99_itl_ms", "p99_e2el_ms"):
        assert metrics[name].verdict is Verdict.NOT_JUDGED
        assert metrics[name].note == f"client-bound (this run): round 1 of 3: {REASON}"
    assert metrics["output_throughput"].verdict is Verdict.REGRESSION  # the server was kept full: judged
    assert verdict.verdict is Verdict.REGRESSION
    same = compare_cell("c", base, bound(copied(base)))
    assert same.verdict is Verdict.NOT_JUDGED  # never a pass
    assert by_name(same)["output_throughput"].verdict is Verdict.NO_CHANGE
    assert by_name(same)["bytes_per_token_measured"].verdict is Verdict.NO_CHANGE  # not a latency: judged


def test_an_underfed_server_s_throughput_is_not_judged_either() -> None:
    base = cell_info()
    metrics = by_name(compare_cell("c", base, bound(scaled(base, 3.0), saturated=False)))
    assert metrics["output_throughput"].verdict is Verdict.NOT_JUDGED
    assert "the server was not kept saturated (occupancy 0.40)" in metrics["output_throughput"].note


def test_a_client_bound_baseline_is_not_judged_against() -> None:
    base = bound(cell_info())
    metrics = by_name(compare_cell("c", base, cell_info()))
    assert metrics["p99_ttft_ms"].verdict is Verdict.NOT_JUDGED
    assert metrics["p99_ttft_ms"].note.startswith("client-bound (the baseline): ")


def test_an_unmarked_cell_is_judged_as_before() -> None:
    base = cell_info()
    assert compare_cell("c", base, copied(base)).verdict is Verdict.NO_CHANGE
    assert compare_cell("c", base, scaled(base, 3.0)).verdict is Verdict.REGRESSION


def test_a_bad_client_section_is_refused_naming_it() -> None:
    data = cell_info().to_dict()
    data["client"] = {"client_bound": "yes"}
    with pytest.raises(ResultsError, match="client: client_bound is 'yes', not true or false"):
        CellRecord.from_dict(data)
