"""The in-process vLLM engine's own scheduler stats, per step: the ``vllm`` backend's engine counters.

vLLM hands every engine step's ``SchedulerStats`` and ``IterationStats`` to its
stat loggers; its Prometheus logger turns them into the ``vllm:*`` metrics a
server exposes. :func:`stat_logger_factory` gives vLLM one more logger
(``LLMEngine.from_engine_args(..., stat_loggers=[...])``) that adds the same
fields, the same way, into a :class:`StepSink` the backend resets before a run
and reads after it. So the figures are those ``vllm-server``'s ``/metrics``
gives, except that peaks are exact (every step is seen, not a sample).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from batchperf.measure.counters import round_counters


@dataclass(slots=True)
class StepSink:
    values: dict[str, float] = field(default_factory=dict)

    def reset(self) -> None:
        self.values = dict.fromkeys(
            ("num_preemptions", "prefix_cache_queries", "prefix_cache_hits", "kv_cache_usage_perc",
             "num_requests_running", "num_requests_waiting", "engine_steps", "iteration_tokens_total",
             "running_request_steps", "prefill_time_seconds_sum", "decode_time_seconds_sum", "finished_requests",
             "prompt_tokens"),
            0.0)

    def record(self, scheduler_stats: Any, iteration_stats: Any) -> None:
        """One step, as ``PrometheusStatLogger.record`` reads it (vLLM 0.32, vllm/v1/metrics/loggers.py)."""
        v = self.values
        if not v:
            self.reset()
        if scheduler_stats is not None:
            v["num_requests_running"] = max(v["num_requests_running"], scheduler_stats.num_running_reqs)
            waiting = scheduler_stats.num_waiting_reqs + scheduler_stats.num_skipped_waiting_reqs
            v["num_requests_waiting"] = max(v["num_requests_waiting"], waiting)
            v["kv_cache_usage_perc"] = max(v["kv_cache_usage_perc"], scheduler_stats.kv_cache_usage)
            v["prefix_cache_queries"] += scheduler_stats.prefix_cache_stats.queries
            v["prefix_cache_hits"] += scheduler_stats.prefix_cache_stats.hits
        if iteration_stats is None:  # a step without outputs: vLLM's iteration histogram skips it too
            return
        v["num_preemptions"] += iteration_stats.num_preempted_reqs
        v["engine_steps"] += 1
        v["prompt_tokens"] += iteration_stats.prompt_token_stats.total  # as vllm:prompt_tokens_total counts them
        v["iteration_tokens_total"] += (iteration_stats.prompt_token_stats.computed
                                        + iteration_stats.num_generation_tokens)
        if scheduler_stats is not None:
            v["running_request_steps"] += scheduler_stats.num_running_reqs
        for finished in iteration_stats.finished_requests:
            v["prefill_time_seconds_sum"] += finished.prefill_time
            v["decode_time_seconds_sum"] += finished.decode_time
            v["finished_requests"] += 1

    def counters(self) -> dict[str, Any]:
        if not self.values:
            self.reset()
        return round_counters(
            dict(self.values),
            {"padding_waste": "no padding: vLLM packs ragged requests into one step (paged KV)"},
            "vllm: the engine's SchedulerStats and IterationStats, every step (as its Prometheus logger reads them)",
        )


def stat_logger_factory(sink: StepSink) -> Callable[[Any, int], Any]:
    """A per-engine stat logger factory for vLLM that records into ``sink``."""
    from vllm.v1.metrics.loggers import StatLoggerBase

    class _SinkLogger(StatLoggerBase):
        def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
            self.engine_index = engine_index

        def record(self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None,
                   engine_idx: int = 0) -> None:
            sink.record(scheduler_stats, iteration_stats)

        def log_engine_initialized(self) -> None:
            pass

    return _SinkLogger
