"""A small real HTTP server on 127.0.0.1 that answers like vLLM's OpenAI server: /v1/models, a streamed
/v1/completions (one token per SSE chunk, then usage), and /metrics with whatever text a test sets
(None: 404). For tests of the vllm-server backend and of /metrics scraping without vLLM."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeServer(ThreadingHTTPServer):
    daemon_threads = True
    metrics: str | None = None  # the /metrics body; None answers 404
    root = "fake"  # the model folder /v1/models names
    metrics_gets = 0

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
                self._send(404, b'{"detail":"Not Found"}', "application/json")
            else:
                self._send(200, self.server.metrics.encode())
        elif self.path == "/v1/models":
            self._send(200, json.dumps({"data": [{"id": "fake", "root": self.server.root}]}).encode(), "application/json")
        else:
            self._send(404, b"")

    def do_POST(self) -> None:
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
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
def fake_server(metrics: str | None = None, root: str = "fake") -> Iterator[FakeServer]:
    """``root``: the model folder /v1/models says it serves (vLLM's ``root``)."""
    server = FakeServer(("127.0.0.1", 0), _Handler)
    server.metrics = metrics
    server.root = root
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
