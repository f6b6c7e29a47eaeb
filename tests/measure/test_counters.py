"""Engine counters: the vocabulary, one run's counters, the cell's summary, and a server's /metrics scraped."""

from __future__ import annotations

import math

import pytest
from fake_openai_server import fake_server
from gate_samples import cell_info
from paths import DATA

from batchperf.backends.vllm_scrape import ScrapeError, ServerScrape, counters_from_scrapes, parse
from batchperf.measure.counters import ABSENT, COUNTERS, absent_all, problem, round_counters, summarise
from batchperf.results.record import CellRecord, ResultsError

# /metrics of a real vLLM 0.32 server (tiny-qwen2, vllm-server backend) before and after 6 requests,
# trimmed to the families batchperf reads and a few others
BEFORE = (DATA / "vllm_0.32_metrics_before.txt").read_text()
AFTER = (DATA / "vllm_0.32_metrics_after.txt").read_text()
URL = "http://127.0.0.1:8000/metrics"


def engine_round(preempt: float, running: float, steps: float, tokens: float, **absent: str) -> dict:
    values = {"num_preemptions": preempt, "kv_cache_usage_perc": 0.5, "num_requests_running": running,
              "num_requests_waiting": 1, "engine_steps": steps, "iteration_tokens_total": tokens,
              "running_request_steps": steps * running}
    reasons = {"prefix_cache_queries": "none", "prefix_cache_hits": "none", "prefix_cache_hit_rate": "none",
               "padding_waste": "none",
               "request_prefill_time_seconds": "none", "request_decode_time_seconds": "none", **absent}
    return round_counters({k: v for k, v in values.items() if k not in absent}, reasons, "test")


# --- one run, the cell ---------------------------------------------------------------------------


def test_a_backend_must_account_for_every_counter() -> None:
    with pytest.raises(ValueError, match="neither measured nor said absent"):
        round_counters({"num_preemptions": 1}, {}, "x")
    with pytest.raises(ValueError, match="unknown raw counter"):
        round_counters({"preemptions": 1}, absent_all("x"), "x")
    with pytest.raises(ValueError, match="not a finite number >= 0"):
        round_counters({"num_preemptions": -1}, absent_all("x", except_=["num_preemptions"]), "x")
    assert round_counters({}, absent_all("no engine"), "x")[ABSENT] == {c.name: "no engine" for c in COUNTERS}


def test_the_cell_keeps_counts_per_round_peaks_at_their_highest_and_pools_ratios() -> None:
    cell = summarise([engine_round(1, 2, 10, 100), engine_round(4, 3, 30, 500)])
    assert cell["num_preemptions"] == 2.5  # mean per measured round: cells of 2 and 5 rounds compare
    assert cell["engine_steps"] == 20
    assert cell["num_requests_running"] == 3  # the peak of any round
    assert cell["iteration_tokens_mean"] == 600 / 40  # pooled, not the mean of 10 and 16.7
    assert cell["num_requests_running_mean"] == (20 + 90) / 40
    assert cell[ABSENT]["padding_waste"] == "none" and "padding_waste" not in cell
    assert problem(cell) is None


def test_a_counter_absent_in_one_round_is_absent_for_the_cell_never_zero() -> None:
    cell = summarise([engine_round(1, 2, 10, 100), engine_round(4, 3, 30, 500, num_preemptions="scrape failed")])
    assert "num_preemptions" not in cell
    assert cell[ABSENT]["num_preemptions"] == "round 2 of 2: scrape failed"
    assert summarise([]) == {} and summarise([{}, {}]) == {}  # traces from before counters existed


def test_a_ratio_with_nothing_to_divide_by_is_absent() -> None:
    cell = summarise([engine_round(0, 0, 0, 0)])
    assert "iteration_tokens_mean" not in cell and "engine steps" in cell[ABSENT]["iteration_tokens_mean"]


@pytest.mark.parametrize(("counters", "message"), [
    ([], "not a mapping"),
    ({"num_preemptions": "3"}, "not a finite number"),
    ({"num_preemptions": math.inf}, "finite number >= 0"),
    ({"num_preemptions": -1}, "finite number >= 0"),
    ({"absent": {"num_preemptions": 3}}, "reason"),
    ({"num_preemptions": 1, "absent": {"num_preemptions": "x"}}, "both measured and said absent"),
    ({"source": 5}, "not text"),
])
def test_a_record_with_bad_counters_is_refused_naming_the_field(counters, message: str) -> None:
    info = cell_info().to_dict()
    info["counters"] = counters
    with pytest.raises(ResultsError, match=f"^r.json: cell-x: counters.*{message}"):
        CellRecord.from_dict(info, where="r.json: cell-x")


def test_records_without_counters_still_read() -> None:
    info = cell_info().to_dict()
    info.pop("counters", None)
    record = CellRecord.from_dict(info)
    assert record.counters == {} and record.value("counters.num_preemptions") is None


# --- a server's /metrics -------------------------------------------------------------------------


def test_counters_are_the_differences_of_vllms_own_metrics() -> None:
    counters = counters_from_scrapes(URL, BEFORE, AFTER, [AFTER], 0.5)
    assert counters["engine_steps"] == 25 and counters["iteration_tokens_total"] == 426
    assert counters["finished_requests"] == 6 and counters["num_preemptions"] == 0
    assert counters["prefill_time_seconds_sum"] == pytest.approx(0.15094401000351354)
    assert counters["kv_cache_usage_perc"] == 0.0  # the one sample was taken when the server was idle
    cell = summarise([counters])
    assert cell["iteration_tokens_mean"] == 426 / 25
    assert cell["request_decode_time_seconds"] == pytest.approx(0.41242405899902224 / 6)
    assert "per-step" in cell[ABSENT]["num_requests_running_mean"]


def test_a_counter_that_went_down_means_a_restart_and_is_absent() -> None:
    counters = counters_from_scrapes(URL, AFTER, BEFORE, [], 0.5)
    assert "engine_steps" not in counters
    assert "restarted" in counters[ABSENT]["engine_steps"] and "restarted" in counters[ABSENT]["iteration_tokens_mean"]
    assert counters["num_preemptions"] == 0  # 0 -> 0 did not go down
    assert "no sample" in counters[ABSENT]["kv_cache_usage_perc"]


def test_a_metric_the_server_does_not_have_is_absent_by_name() -> None:
    older = "\n".join(line for line in AFTER.splitlines() if "num_preemptions" not in line) + "\n"
    counters = counters_from_scrapes(URL, older, older, [older], 0.5)
    assert counters[ABSENT]["num_preemptions"] == f"{URL} has no vllm:num_preemptions_total"
    assert counters["engine_steps"] == 0


@pytest.mark.parametrize("text", ["<html>Not Found</html>", "vllm:x{engine=0 1\n", ""])
def test_text_that_is_not_prometheus_is_an_error_with_the_reason(text: str) -> None:
    with pytest.raises(ScrapeError, match="not Prometheus text|holds no metrics"):
        parse(text, URL)
    counters = counters_from_scrapes(URL, text, AFTER, [], 0.5)
    assert set(counters[ABSENT]) == {c.name for c in COUNTERS}
    assert all(URL in why for why in counters[ABSENT].values())


def test_a_missing_metrics_endpoint_leaves_every_counter_absent_with_the_http_error() -> None:
    with fake_server(metrics=None) as server:
        scrape = ServerScrape(server.url + "/metrics", 0.0)
        scrape.start()
        counters = scrape.stop()
    assert set(counters[ABSENT]) == {c.name for c in COUNTERS}
    assert counters[ABSENT]["num_preemptions"] == f"GET {server.url}/metrics: HTTP 404 Not Found"


def test_a_server_that_is_gone_leaves_every_counter_absent() -> None:
    with fake_server(metrics=AFTER) as server:
        url = server.url + "/metrics"
    scrape = ServerScrape(url, 0.0)
    scrape.start()
    assert "Connection refused" in scrape.stop()[ABSENT]["engine_steps"]


def test_gauges_are_sampled_during_the_run_and_absent_when_sampling_is_off() -> None:
    busy = AFTER.replace('vllm:num_requests_running{engine="0",model_name="batchperf"} 0.0',
                         'vllm:num_requests_running{engine="0",model_name="batchperf"} 3.0')
    assert busy != AFTER
    with fake_server(metrics=BEFORE) as server:
        scrape = ServerScrape(server.url + "/metrics", 0.01)
        scrape.start()
        server.metrics = busy  # the run
        while server.metrics_gets < 4:
            pass
        server.metrics = AFTER
        counters = scrape.stop()
        off = ServerScrape(server.url + "/metrics", 0.0)
        off.start()
        gauges_off = off.stop()
    assert counters["num_requests_running"] == 3 and counters["engine_steps"] == 25
    assert "sampling is off" in gauges_off[ABSENT]["num_requests_running"]
