"""A counter that is a fraction of a whole (``kv_cache_usage_perc``, ``padding_waste``) is at most 1 (issue 26,
minor): vLLM's ``kv_cache_usage_perc`` is a fraction despite its name, so 57 is a server that says percent, or an
edit; it is refused in a results file and from a backend, and a server's sample above 1 leaves the counter absent
with the reason instead of storing 5700%."""

from __future__ import annotations

import re

import pytest
from gate_samples import cell_info
from paths import DATA

from batchperf.backends.vllm_scrape import counters_from_scrapes
from batchperf.measure.counters import ABSENT, absent_all, problem, round_counters
from batchperf.results.record import CellRecord, ResultsError

BEFORE = (DATA / "vllm_0.32_metrics_before.txt").read_text()
AFTER = (DATA / "vllm_0.32_metrics_after.txt").read_text()
URL = "http://127.0.0.1:8000/metrics"


@pytest.mark.parametrize("name", ["kv_cache_usage_perc", "padding_waste"])
def test_a_stored_fraction_above_one_is_refused_naming_it(name: str) -> None:
    assert problem({name: 1.0}) is None
    assert problem({name: 57.0}) == f"{name} is 57.0: a fraction of a whole, at most 1"
    info = cell_info().to_dict()
    info["counters"] = {name: 57.0}
    with pytest.raises(ResultsError, match=f"^r.json: cell-x: counters: {name} is 57.0: a fraction"):
        CellRecord.from_dict(info, where="r.json: cell-x")


def test_a_backend_reporting_a_fraction_above_one_is_an_error() -> None:
    with pytest.raises(ValueError, match="counter kv_cache_usage_perc is 1.5: a fraction of a whole, at most 1"):
        round_counters({"kv_cache_usage_perc": 1.5}, absent_all("n/a", except_=["kv_cache_usage_perc"]), "test")


def test_a_server_sampling_above_one_leaves_the_counter_absent_with_the_reason() -> None:
    percent = re.sub(r"^(vllm:kv_cache_usage_perc\{[^}]*\}) \S+$", r"\1 57.0", AFTER, flags=re.M)
    assert percent != AFTER
    counters = counters_from_scrapes(URL, BEFORE, AFTER, [percent], 0.5)
    assert "kv_cache_usage_perc" not in {k for k in counters if k != ABSENT}
    assert counters[ABSENT]["kv_cache_usage_perc"].startswith("vllm:kv_cache_usage_perc read 57.0, above 1")
