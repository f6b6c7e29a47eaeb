"""vLLM as the oracle: batchperf's traces as vLLM's own request records, scored by vLLM's own code.

A request's trace becomes the ``RequestFuncOutput`` that vLLM's
``async_request_openai_completions`` (vllm/benchmarks/lib/endpoint_request_func.py)
would have built from the same events: ``start_time`` is the send, then one
event per chunk (the first sets ``ttft``, each later one appends an ``itl``
gap to the previous), ``latency`` is the last chunk, ``output_tokens`` the
tokens produced (the ``usage`` count). ``calculate_metrics`` from
``vllm.benchmarks.serve`` then computes the numbers; :func:`vllm_metrics`
returns them under batchperf's names. Nothing here calls batchperf's metrics.
"""

from __future__ import annotations

from typing import Any

from batchperf.measure.trace import RequestTrace, RunTrace

PERCENTILES = [50.0, 90.0, 99.0]
# vLLM's BenchmarkMetrics field -> batchperf's name, where they differ
RENAMED = {"total_input": "total_input_tokens", "total_output": "total_output_tokens"}
# what batchperf reports and vLLM's calculate_metrics does not: the duration is its input, the sample
# counts are batchperf's, and send_delay has no vLLM counterpart (its client_queue_time includes the
# wait for a concurrency slot, and is computed outside calculate_metrics)
NOT_IN_VLLM = ("duration", "n_ttft", "n_tpot", "n_itl", "n_e2el", "n_send_delay", "mean_send_delay_ms",
               "median_send_delay_ms", "std_send_delay_ms", "p50_send_delay_ms", "p90_send_delay_ms",
               "p99_send_delay_ms")


def request_output(trace: RequestTrace) -> Any:
    """The record vLLM's completions client would have made of this request's stream."""
    from vllm.benchmarks.lib.endpoint_request_func import RequestFuncOutput

    out = RequestFuncOutput(prompt_len=trace.prompt_len)
    st = out.start_time = trace.start
    most_recent = st
    for i, t in enumerate(trace.chunk_times):  # one streamed message with a choice per chunk
        if i == 0:
            out.ttft = t - st
        else:
            out.itl.append(t - most_recent)
        most_recent = t
    out.output_tokens = trace.output_len  # the usage chunk's completion_tokens
    out.latency = most_recent - st
    # vLLM: success when a chunk arrived; batchperf also fails a request on an error of its own
    out.success = trace.output_len > 0 and trace.error is None
    if not out.success:
        out.error = trace.error or "no chunk"
    return out


def vllm_metrics(run: RunTrace, goodput_ms: dict[str, float] | None = None) -> dict[str, float]:
    """vLLM's ``calculate_metrics`` on ``run``, under batchperf's metric names."""
    from vllm.benchmarks.serve import calculate_metrics

    outputs = [request_output(r) for r in run.requests]
    metrics, _ = calculate_metrics(input_requests=[], outputs=outputs, dur_s=run.duration, tokenizer=None,
                                   selected_percentiles=PERCENTILES, goodput_config_dict=goodput_ms or {})
    named: dict[str, float] = {}
    for key, value in vars(metrics).items():
        if key.startswith("percentiles_"):
            family = key.removeprefix("percentiles_")
            named |= {f"p{int(p)}_{family}": float(v) for p, v in value}
        elif key not in ("max_output_tokens_per_s", "max_concurrent_requests", "rtfx"):
            named[RENAMED.get(key, key)] = float(value)
    if not goodput_ms:
        named.pop("request_goodput")
    return named
