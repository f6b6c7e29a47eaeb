"""A small real HTTP/1.1 server on 127.0.0.1 that answers like vLLM's OpenAI server (keep-alive connections):
/v1/models, a streamed, chunked /v1/completions (one token per SSE message, then usage and [DONE]; optionally
after a first-token and a per-token delay), /metrics with whatever text a test sets (None: 404) or, with
``vllm_metrics``, vLLM's latency histograms of the requests it served, timed as vLLM times them (from the
request's arrival to each token's write),
and, as in vLLM's development mode (VLLM_SERVER_DEV_MODE=1), its config on /server_info (None: 404, a server
outside that mode). For tests of the vllm-server backend, of a server the suite did not start, and of
/metrics scraping, without vLLM. The JSON answers are shaped as vLLM 0.32 answers, as seen on a real server
on the tiny model.

Two hostile modes: ``hang=True`` accepts each completion request and never answers it (until the server
stops); ``sse=[...]`` streams those ``data:`` payloads verbatim instead of the usual chunks (wrong-shaped
JSON). ``posts`` counts the completion requests received."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

NOT_FOUND = b'{"detail":"Not Found"}'  # FastAPI's 404, as vLLM answers it


def models_answer(root: str = "fake", max_model_len: int = 4096) -> dict[str, Any]:
    """vLLM's /v1/models: ``root`` is the folder or hub id it loaded."""
    return {"object": "list", "data": [{"id": "served-name", "object": "model", "root": root, "parent": None,
                                        "max_model_len": max_model_len}]}


def server_info(max_num_seqs: int, dtype: str = "torch.float32") -> dict[str, Any]:
    """vLLM's /server_info?config_format=json (development mode), cut to what batchperf reads."""
    return {"vllm_config": {"scheduler_config": {"max_num_seqs": max_num_seqs, "max_num_active_seqs": None},
                            "model_config": {"dtype": dtype, "max_model_len": 4096}}}


class FakeServer(ThreadingHTTPServer):
    daemon_threads = True
    metrics: str | None = None  # the /metrics body; None answers 404
    models: dict[str, Any]  # the /v1/models answer
    info: dict[str, Any] | None = None  # the /server_info answer; None answers 404
    metrics_gets = 0
    completion_connections: set[tuple[str, int]]  # the client addresses /v1/completions came from: one per connection
    first_token_delay_s = 0.0  # the server's "prefill": before the first chunk
    token_delay_s = 0.0  # its "decode": before each later chunk
    last_chunk_delay_s = 0.0  # between [DONE] and the chunk that ends the response
    histograms: dict[str, Any]
    registry: Any = None  # vLLM's latency histograms (vllm_metrics); None: /metrics is the ``metrics`` text

    def observe(self, arrival: float, first: float, end: float, tokens: int) -> None:
        """One finished request's vLLM histograms (vllm/v1/metrics/loggers.py names)."""
        h = self.histograms
        h["vllm:time_to_first_token_seconds"].observe(first - arrival)
        h["vllm:e2e_request_latency_seconds"].observe(end - arrival)
        h["vllm:request_queue_time_seconds"].observe(0.0)
        h["vllm:request_time_per_output_token_seconds"].observe((end - first) / max(tokens - 1, 1))
    posts = 0  # completion requests received
    hang = False  # accept completion requests and never answer them
    sse: list[str] | None = None  # the data: payloads a completion streams, verbatim; None: the usual chunks
    stopping: threading.Event
    payloads: list[dict[str, Any]]  # every /v1/completions request body received, in order
    resets = 0  # POST /reset_prefix_cache received

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: FakeServer
    protocol_version = "HTTP/1.1"  # keep-alive, as uvicorn serves vLLM: a stream is chunked, ends with a 0 chunk

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def _send(self, status: int, body: bytes, content_type: str = "text/plain") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/metrics":
            self.server.metrics_gets += 1
            if self.server.registry is not None:
                from prometheus_client import generate_latest

                self._send(200, generate_latest(self.server.registry))
            elif self.server.metrics is None:
                self._send(404, NOT_FOUND, "application/json")
            else:
                self._send(200, self.server.metrics.encode())
        elif self.path == "/v1/models":
            self._send_json(self.server.models)
        elif self.path == "/server_info?config_format=json":
            self._send_json(self.server.info)
        else:
            self._send(404, NOT_FOUND, "application/json")

    def _send_json(self, answer: Any) -> None:
        if answer is None:
            self._send(404, NOT_FOUND, "application/json")
        else:
            self._send(200, json.dumps(answer).encode(), "application/json")

    def do_POST(self) -> None:
        if self.path == "/reset_prefix_cache":  # a development route, as /server_info
            self.server.resets += 1
            self._send_json(None if self.server.info is None else {"success": True})
            return
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        arrival = time.monotonic()
        self.server.completion_connections.add(self.client_address)
        self.server.posts += 1
        if self.server.hang:  # read the request, say nothing, hold the connection until the server stops
            self.server.stopping.wait()
            return
        self.server.payloads.append(payload)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        first = arrival
        if self.server.sse is not None:
            for data in self.server.sse:
                self._chunk(f"data: {data}\n\n".encode())
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")
            return
        for i in range(payload["max_tokens"]):
            time.sleep(self.server.first_token_delay_s if i == 0 else self.server.token_delay_s)
            chunk = {"choices": [{"index": 0, "text": "x", "token_ids": [i % 7]}]}
            self._chunk(f"data: {json.dumps(chunk)}\n\n".encode())
            first = first if i else time.monotonic()
        if self.server.registry is not None:
            self.server.observe(arrival, first, time.monotonic(), payload["max_tokens"])
        usage = {"choices": [], "usage": {"completion_tokens": payload["max_tokens"]}}
        self._chunk(f"data: {json.dumps(usage)}\n\n".encode())
        self._chunk(b"data: [DONE]\n\n")
        time.sleep(self.server.last_chunk_delay_s)
        self._chunk(b"")  # the last chunk, written on its own as uvicorn does: the response ends here

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


@contextmanager
def fake_server(metrics: str | None = None, root: str = "fake", models: Any = None,
                info: dict[str, Any] | None = None, vllm_metrics: bool = False, first_token_delay_s: float = 0.0,
                token_delay_s: float = 0.0, hang: bool = False, sse: list[str] | None = None) -> Iterator[FakeServer]:
    """``root``: the model folder /v1/models says it serves (vLLM's ``root``), unless ``models`` gives the whole
    answer; ``info``: the /server_info answer (None: a server outside development mode); ``vllm_metrics``:
    /metrics serves vLLM's latency histograms of what it served (instead of ``metrics``); ``hang`` and ``sse``:
    the hostile modes (module docstring)."""
    server = FakeServer(("127.0.0.1", 0), _Handler)
    server.metrics = metrics
    server.completion_connections = set()
    server.first_token_delay_s, server.token_delay_s = first_token_delay_s, token_delay_s
    if vllm_metrics:
        from prometheus_client import CollectorRegistry, Histogram

        server.registry = CollectorRegistry()
        server.histograms = {name: Histogram(name.removesuffix("_seconds"), "vLLM's", unit="seconds",
                                             registry=server.registry)
                             for name in ("vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds",
                                          "vllm:request_queue_time_seconds",
                                          "vllm:request_time_per_output_token_seconds")}
    server.models = models_answer(root) if models is None else models
    server.info = info
    server.hang, server.sse, server.stopping = hang, sse, threading.Event()
    server.payloads = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.stopping.set()  # a hanging handler returns
        server.shutdown()
        server.server_close()
        thread.join()
