"""Did the client, not the server, set a cell's latency? The client-lag check of a server cell.

A client that falls behind (its event loop busy, its process waiting for a core) reads each streamed
message late, and the latencies it prints describe the client. Two witnesses say when that happened:

- **the event loop's own lag**: a timer due every ``interval_s`` on the client's loop, and how late each
  firing was (:class:`LoopLagMonitor`). A chunk that arrived while the loop was late waited at least that
  long in the socket before it was parsed. The time from a chunk's arrival in the socket to its parse
  cannot be known per request from inside aiohttp (its transport reads with ``recv``; the kernel's receive
  timestamp needs ``recvmsg`` with ``SO_TIMESTAMPNS``): ``tools/wire_capture.py`` measures it from outside.
- **the server's own latencies**: vLLM's ``/metrics`` histograms, differenced over the run
  (:func:`batchperf.backends.vllm_scrape.server_latencies`): their ``_sum`` / ``_count`` give the mean TTFT, E2E
  latency, queue time and time per output token of the run's requests *as the server timed them* (from the
  request's arrival in its frontend to the token leaving its output processor). Client TTFT can exceed the
  server's only by the network, the HTTP handling around the engine and the client's own delay. What the
  histograms cannot give: a single request's value, exact percentiles (only bucket counts), chunk-level ITL.

A round is **client-bound** when the loop stalled longer than :data:`STALL_BOUND_MS` while a request was in flight
(:func:`stalls_in_flight`: the stall, and the requests it could have delayed, are stored) or the client's mean
TTFT exceeds the server's by more than ``× TTFT_RATIO_BOUND + TTFT_SLACK_MS``. A stall is judged by its effect,
not by how rare it was among the timer's samples: under real-time scheduling one 23-270 ms stall in a run is
under 1% of the samples (the P99 of the lag stays near 1 ms) yet moves a concurrency-1 run's mean TTFT by
6-30% (issue 39); the gate then does not judge
the cell's latencies (:mod:`batchperf.regress.gate`), and judges its throughput only when the server was kept
saturated: the server's own E2E time summed over the run's requests (by Little's law, duration × the mean number
of requests it held, running or queued) covers at least :data:`SATURATED_OCCUPANCY` of ``duration × slots``,
``slots`` being what the server could run at once (the batch size, or fewer requests in flight): a client that
reads late frees its slot late and can leave the server without a full batch.
"""

from __future__ import annotations

import asyncio
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from batchperf.measure.trace import RequestTrace

# a loop stall longer than this with a request in flight marks the round: above the timer's jitter under SCHED_FIFO
# on the loaded 2-core VM (lag max 1.2-8.2 ms in runs within 1% of the wire), below the shortest stall seen to move
# a run off the wire (23 ms; issue 39)
STALL_BOUND_MS = 10.0
# client mean TTFT may exceed the server's x TTFT_RATIO_BOUND + TTFT_SLACK_MS. vLLM's TTFT histogram starts when the
# request reaches its engine, not its HTTP front end, whose time grows with the load: in the wire study's 20 runs
# (studies/wire/README.md, load average 8.6-29.4) the wire's mean TTFT reached the server's x 1.198 + 2 ms (23% over it
# at concurrency 1, 171 ms at 16), and a client on time is within the study's 5% of the wire: 1.198 x 1.05 = 1.258.
# The old x 1.10 + 2 ms marked 6 of those 20 on-time runs; a lag under ~25% of TTFT is left to the stall rule.
TTFT_RATIO_BOUND = 1.26
TTFT_SLACK_MS = 2.0  # loopback, HTTP parsing, the client's send path: what a fast server's TTFT leaves to the ratio
CLIENT_WITHIN = 0.05  # a client on time: its means within 5% of the wire's (the wire study's bar)
SATURATED_OCCUPANCY = 0.90  # the server's E2E time over duration x slots it could run, below which it was underfed
LOOP_LAG_INTERVAL_S = 0.002  # the timer's period: fine enough to see a 5 ms stall, ~0.5% of a core
ABSENT = "absent"  # figure -> why it is absent
REASONS = "reasons"  # why a round (or a cell) is client-bound; empty when it is not
BOUND = "client_bound"
SATURATED = "server_saturated"
SCHEDULING = "scheduling"  # what the client's threads ran under (batchperf.backends.realtime), in words
STALLS = "stalls"  # the stalls with requests in flight: start_s, ms, request_ids (and, in a cell's, the round)


class LoopLagMonitor:
    """How late a periodic timer fires on ``loop``: the loop's lag, sampled every ``interval_s``.

    ``arm()`` (re)starts the timer from now; call it when the loop starts to matter (a request is in flight)
    so that time the loop spent not running at all, with nothing in flight, is not counted as lag.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, interval_s: float = LOOP_LAG_INTERVAL_S,
                 now: Callable[[], float] | None = None) -> None:
        """``now``: the clock the stalls are stamped on (the run's, to set them beside the requests' times;
        default the loop's)."""
        if not interval_s > 0:
            raise ValueError(f"loop lag interval_s must be > 0, got {interval_s}")
        self.loop = loop
        self.interval_s = interval_s
        self.now = now or loop.time
        self.lags: list[float] = []  # s: how late each firing was
        self.stalls: list[tuple[float, float]] = []  # (s on ``now``'s clock when it began, s long): lags > the bound
        self._due = 0.0
        self._handle: asyncio.TimerHandle | None = None

    def arm(self) -> None:
        self.stop()
        self._due = self.loop.time() + self.interval_s
        self._handle = self.loop.call_at(self._due, self._fire)

    def _fire(self) -> None:
        now = self.loop.time()
        lag = max(now - self._due, 0.0)
        self.lags.append(lag)
        if lag * 1e3 > STALL_BOUND_MS:
            self.stalls.append((self.now() - lag, lag))
        self._due = now + self.interval_s
        self._handle = self.loop.call_at(self._due, self._fire)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def summary(self) -> dict[str, Any]:
        """``loop_lag_mean_ms``, ``loop_lag_p99_ms``, ``loop_lag_max_ms``, ``loop_lag_samples``."""
        if not self.lags:
            return {"loop_lag_samples": 0, ABSENT: {"loop_lag": "the loop ran no timer period with work in flight"}}
        ms = [lag * 1e3 for lag in self.lags]
        return {"loop_lag_mean_ms": statistics.fmean(ms), "loop_lag_p99_ms": _p99(ms), "loop_lag_max_ms": max(ms),
                "loop_lag_samples": len(ms)}


def _p99(values: Sequence[float]) -> float:
    """numpy's linear-interpolation percentile (the metrics' definition), without numpy."""
    ordered = sorted(values)
    pos = 0.99 * (len(ordered) - 1)
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def stalls_in_flight(stalls: Sequence[tuple[float, float]], requests: Sequence[RequestTrace]) -> list[dict[str, Any]]:
    """The stalls (:attr:`LoopLagMonitor.stalls`, on the run's clock) that overlapped a request in flight, from its
    send to its last token read, each with the ids of those requests: a chunk of theirs that arrived during the
    stall was read when it ended. A stall with nothing in flight delayed nothing (the next send reads the clock
    after it)."""
    out = []
    for start, length in stalls:
        end = start + length
        ids = [r.request_id for r in requests if r.start < end and r.finished > start]
        if ids:
            out.append({"start_s": start, "ms": length * 1e3, "request_ids": ids})
    return out


def check_round(lag: Mapping[str, Any], server: Mapping[str, Any], client: Mapping[str, float], *,
                duration_s: float, slots: int, stalls: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """One round's check: the loop lag, its stalls, the server's and the client's means, their differences, the
    verdict.

    ``lag``: :meth:`LoopLagMonitor.summary`; ``server``: :func:`~batchperf.backends.vllm_scrape.server_latencies`;
    ``client``: the round's metrics (``mean_ttft_ms``, ``mean_e2el_ms``, ``completed``); ``slots``: the most
    requests the server could run at once (its batch size, or the requests in flight when fewer); ``stalls``:
    :func:`stalls_in_flight` (None: not watched).
    """
    out: dict[str, Any] = {k: v for k, v in lag.items() if k != ABSENT}
    absent = {**lag.get(ABSENT, {}), **server.get(ABSENT, {})}
    served, completed = server.get("server_requests"), client.get("completed")
    if served is not None and completed is not None and served != completed:
        why = (f"the server finished {served:g} requests during the run, the client completed {completed:g}: "
               "another client shares the server, its means are not this cell's")
        absent.update(dict.fromkeys((k for k in server if k.startswith("server_")), why))
        server = {}
    out.update({k: v for k, v in server.items() if k != ABSENT})
    reasons: list[str] = []
    if stalls is not None:
        delayed = sorted({i for stall in stalls for i in stall["request_ids"]})
        out |= {"loop_stalls": len(stalls), "delayed_requests": len(delayed), STALLS: [dict(s) for s in stalls]}
        if stalls:
            longest = max(stalls, key=lambda stall: stall["ms"])
            reasons.append(f"the client's event loop stalled longer than {STALL_BOUND_MS:g} ms {len(stalls)} time(s) "
                           f"with requests in flight (longest {longest['ms']:.1f} ms at {longest['start_s']:.3f} s); "
                           f"read late: requests {', '.join(map(str, delayed))}")
    for family in ("ttft", "e2el"):
        mine, theirs = client.get(f"mean_{family}_ms"), server.get(f"server_mean_{family}_ms")
        if mine is None or theirs is None:
            continue
        out[f"client_mean_{family}_ms"] = mine
        # a client cannot see a token before the server produced it: a negative difference means clocks disagree
        if mine >= theirs:
            out[f"{family}_client_excess_ms"] = mine - theirs
        else:
            absent[f"{family}_client_excess_ms"] = (f"client mean {family.upper()} {mine:.2f} ms below the server's "
                                                    f"{theirs:.2f} ms: the two clocks disagree")
    ttft, server_ttft = client.get("mean_ttft_ms"), server.get("server_mean_ttft_ms")
    if ttft is not None and server_ttft is not None:
        bound = server_ttft * TTFT_RATIO_BOUND + TTFT_SLACK_MS
        if ttft > bound:
            reasons.append(f"client mean TTFT {ttft:.2f} ms > server mean TTFT {server_ttft:.2f} ms "
                           f"x {TTFT_RATIO_BOUND:g} + {TTFT_SLACK_MS:g} ms = {bound:.2f} ms")
    elif "loop_lag_p99_ms" not in lag:
        reasons.append("cannot tell: neither the loop lag nor the server's TTFT was measured")
    e2el, served = server.get("server_mean_e2el_ms"), server.get("server_requests")
    if e2el is not None and served and duration_s > 0 and slots > 0:
        out["server_occupancy"] = e2el * 1e-3 * served / (duration_s * slots)
    saturated = out.get("server_occupancy", 0.0) >= SATURATED_OCCUPANCY
    return {**out, BOUND: bool(reasons), SATURATED: saturated, REASONS: reasons, ABSENT: absent}


# the cell keeps the median of each round's figure (as its metrics), and the worst for the lag's tail
WORST = ("loop_lag_p99_ms", "loop_lag_max_ms", "loop_stalls", "delayed_requests")


def summarise(rounds: Sequence[Mapping[str, Any]], label: str = "round") -> dict[str, Any]:
    """The cell's check from its rounds': client-bound when any round was (the reasons name the rounds);
    its throughput judged only when every client-bound round kept the server saturated. {} without rounds.
    A baseline pooled from several runs summarises the runs' checks the same way (``label="run"``)."""
    rounds = [r for r in rounds if r]
    if not rounds:
        return {}
    keys = sorted({k for r in rounds for k, v in r.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)})
    out: dict[str, Any] = {}
    for key in keys:
        values = [float(r[key]) for r in rounds if key in r]
        out[key] = max(values) if key in WORST else statistics.median(values)
    reasons = [f"{label} {i} of {len(rounds)}: {why}" for i, r in enumerate(rounds, 1) for why in r.get(REASONS, [])]
    bound = [r for r in rounds if r.get(BOUND)]
    absent: dict[str, str] = {}
    for r in rounds:
        for k, why in (r.get(ABSENT) or {}).items():
            absent.setdefault(k, why)
    scheduling = sorted({str(r[SCHEDULING]) for r in rounds if SCHEDULING in r})
    stalls = [{label: i, **stall} for i, r in enumerate(rounds, 1) for stall in r.get(STALLS, [])]
    return {**out, BOUND: bool(bound), SATURATED: all(r.get(SATURATED) for r in bound) if bound else True,
            REASONS: reasons, ABSENT: absent, **({SCHEDULING: "; ".join(scheduling)} if scheduling else {}),
            **({STALLS: stalls} if any(STALLS in r for r in rounds) else {})}


def problem(section: Any) -> str | None:
    """What is wrong with a cell's ``client`` section as read from a file; None when it is sound."""
    if not isinstance(section, Mapping):
        return f"is a {type(section).__name__}, not a mapping"
    for key in (BOUND, SATURATED):
        if key in section and not isinstance(section[key], bool):
            return f"{key} is {section[key]!r}, not true or false"
    if not isinstance(section.get(REASONS, []), list) or not all(isinstance(r, str) for r in section.get(REASONS, [])):
        return "reasons must be a list of text"
    stalls = section.get(STALLS, [])
    if not isinstance(stalls, list) or not all(isinstance(s, Mapping) and isinstance(s.get("request_ids"), list)
                                               for s in stalls):
        return "stalls must be a list of mappings, each with its request_ids"
    return None
