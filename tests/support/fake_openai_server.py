"""A small real HTTP server on 127.0.0.1 that answers like vLLM's OpenAI server: /v1/models, a streamed
/v1/completions (one token per SSE chunk, then usage), /metrics with whatever text a test sets (None: 404),
and, as in vLLM's development mode (VLLM_SERVER_DEV_MODE=1), its config on /server_info (None: 404, a server
outside that mode). For tests of the vllm-server backend, of a server the suite did not start, and of
/metrics scraping, without vLLM. The JSON answers are shaped as vLLM 0.32 answers, as seen on a real server
on the tiny model."""

from __future__ import annotations

import json
import threading
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
    payloads: list[dict[str, Any]]  # every /v1/completions request body received, in order
    resets = 0  # POST /reset_prefix_cache received

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: FakeServer
    protocol_version = "HTTP/1.0"  # the body ends when the connection closes: no chunked encoding to write

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
            if self.server.metrics is None:
                self._send(404, NOT_FOUND, "application/json")
            else:
                self._send(200, self.server.metrics.encode())
        elif self.path == "/v1/models":
            self._send_json(self.server.models)
        elif self.path == "/server_info?config_format=json":
            self._send_json(self.server.info)
        else:
            self._send(404, NOT_FOUND, "application/json")

    def _send_json(self, answer: dict[str, Any] | None) -> None:
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
        self.server.payloads.append(payload)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for i in range(payload["max_tokens"]):
            chunk = {"choices": [{"index": 0, "text": "x", "token_ids": [i % 7]}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        usage = {"choices": [], "usage": {"completion_tokens": payload["max_tokens"]}}
        self.wfile.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())


@contextmanager
def fake_server(metrics: str | None = None, root: str = "fake", models: dict[str, Any] | None = None,
                info: dict[str, Any] | None = None) -> Iterator[FakeServer]:
    """``root``: the model folder /v1/models says it serves (vLLM's ``root``), unless ``models`` gives the whole
    answer; ``info``: the /server_info answer (None: a server outside development mode)."""
    server = FakeServer(("127.0.0.1", 0), _Handler)
    server.metrics = metrics
    server.models = models_answer(root) if models is None else models
    server.info = info
    server.payloads = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
