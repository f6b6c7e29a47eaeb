"""The wire's timing of a streamed completion: TCP reassembly, HTTP/1.1 (chunked) and SSE parsing on hand-built
packets, the wire's RunTrace by the client's metric definitions, and (as root) a real loopback capture."""

from __future__ import annotations

import json

import pytest
from fake_openai_server import fake_server
from wire_frames import CLIENT_PORT, PORT, frame

from batchperf.measure import wire
from batchperf.measure.metrics import compute_metrics
from batchperf.measure.trace import RunTrace
from batchperf.telemetry import wire_capture
from batchperf.workload.spec import LengthSpec, WorkloadSpec


def sse(tokens: list[int]) -> bytes:
    return f"data: {json.dumps({'choices': [{'index': 0, 'text': 'x', 'token_ids': tokens}]})}\n\n".encode()


def chunked(body: bytes) -> bytes:
    return f"{len(body):x}\r\n".encode() + body + b"\r\n"


def conversation(prompt: list[int], t0: float) -> list[tuple[float, bytes]]:
    """One keep-alive POST and its chunked SSE answer: the first token at t0 + 0.010, then a message of 2 tokens
    split across two packets (complete at t0 + 0.030), then usage and [DONE]; plus a retransmitted packet."""
    body = json.dumps({"prompt": prompt, "max_tokens": 3}).encode()
    request = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + str(len(body)).encode()
               + b"\r\n\r\n" + body)
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    first, second = chunked(sse([5])), chunked(sse([6, 7]))
    usage = b'data: {"choices": [], "usage": {"completion_tokens": 3}}\n\n'
    rest = chunked(usage) + chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n"
    up, down = 1000, 5000
    half = len(second) // 2
    return [
        (t0 - 0.001, frame(CLIENT_PORT, PORT, up - 1, flags=0x02)),  # SYN
        (t0 - 0.001, frame(PORT, CLIENT_PORT, down - 1, flags=0x12)),  # SYN-ACK
        (t0, frame(CLIENT_PORT, PORT, up, request)),
        (t0 + 0.010, frame(PORT, CLIENT_PORT, down, head + first)),
        (t0 + 0.020, frame(PORT, CLIENT_PORT, down + len(head + first), second[:half])),
        (t0 + 0.025, frame(PORT, CLIENT_PORT, down + len(head + first), second[:half])),  # a retransmission
        (t0 + 0.030, frame(PORT, CLIENT_PORT, down + len(head + first) + half, second[half:])),
        (t0 + 0.031, frame(PORT, CLIENT_PORT, down + len(head + first + second), rest)),
    ]


def test_a_streamed_completion_is_timed_by_its_packets() -> None:
    (request,) = wire.completions(conversation([1, 2, 3], 100.0), PORT)
    assert request.prompt == (1, 2, 3) and request.status == 200 and request.sent == 100.0
    assert request.chunks == ((100.010, 1), (100.030, 2))  # the split message counts when its last byte came


def test_the_wire_trace_has_the_client_s_definitions() -> None:
    workload = WorkloadSpec(num_prompts=1, prompt_len=LengthSpec.parse("3"), output_lens=(3,)).build(100, 64)
    spec = workload.requests[0]
    requests = wire.completions(conversation(list(spec.prompt_ids), 100.0), PORT)
    client = RunTrace("vllm-server", 2, 2, [], end=1.0)
    trace = wire.wire_trace(requests, {tuple(spec.prompt_ids): spec}, client)
    m = compute_metrics(trace)
    assert m["mean_ttft_ms"] == pytest.approx(10.0) and m["mean_e2el_ms"] == pytest.approx(30.0)
    assert m["mean_tpot_ms"] == pytest.approx(10.0) and m["mean_itl_ms"] == pytest.approx(20.0)
    with pytest.raises(ValueError, match="holds none of the run's requests"):
        wire.wire_trace(requests, {}, client)


def test_the_wire_must_hold_every_request_the_client_read() -> None:
    workload = WorkloadSpec(num_prompts=1, prompt_len=LengthSpec.parse("3"), output_lens=(3,)).build(100, 64)
    spec = workload.requests[0]
    requests = wire.completions(conversation(list(spec.prompt_ids), 100.0)[:3], PORT)  # no answer captured
    from batchperf.measure.trace import RequestTrace

    read = RequestTrace(spec.request_id, 3, 3, 0.0, 0.0, (0.01, 0.02, 0.03), sent=0.0, chunk_sizes=(1, 2))
    with pytest.raises(ValueError, match="the client read 3 tokens, the capture holds 0"):
        wire.wire_trace(requests, {tuple(spec.prompt_ids): spec}, RunTrace("vllm-server", 2, 2, [read], end=0.03))


def test_a_lost_segment_is_an_error_not_a_wrong_stream() -> None:
    packets = conversation([1], 0.0)
    del packets[4:6]  # the first half of the split message never arrives (nor its retransmission)
    with pytest.raises(ValueError, match="packets were lost or reordered"):
        wire.completions(packets, PORT)


def test_a_real_loopback_capture_times_the_fake_server(tmp_path, tiny_model) -> None:
    pytest.importorskip("aiohttp")
    try:
        wire_capture.open_capture(9).close()
    except PermissionError as exc:
        pytest.skip(str(exc))
    from batchperf.backends import create_backend

    workload = WorkloadSpec(num_prompts=4, prompt_len=LengthSpec.parse("8"), output_lens=(4,)).build(1000, 4096)
    with fake_server(root=str(tiny_model.path), first_token_delay_s=0.02) as server:
        with wire_capture.Capture(server.server_address[1], tmp_path) as capture:
            trace = create_backend("vllm-server", tiny_model, server_url=f"2={server.url}").run(workload, 2, 2)
    assert capture.stats["dropped"] == 0
    theirs = wire.wire_trace(wire.completions(capture.packets, server.server_address[1]),
                             {tuple(s.prompt_ids): s for s in workload.requests}, trace)
    assert [r.chunk_sizes for r in theirs.requests] == [r.chunk_sizes for r in trace.requests]
    assert all(r.ttft >= 0.02 for r in theirs.requests)  # the server's own delay, seen on the wire
    late = wire.chunk_lateness(trace, theirs)
    assert len(late) == 16 and all(x > -0.001 for x in late)  # the client never stamps before the wire
