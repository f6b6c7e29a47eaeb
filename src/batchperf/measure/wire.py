"""The wire as the arbiter: a server cell's requests timed from a loopback packet capture, not by the client.

A client that falls behind stamps tokens when it *reads* them; the kernel stamps each packet when it crosses
the interface (:mod:`batchperf.telemetry.wire_capture` records them). :func:`completions` reassembles each TCP
connection, parses HTTP/1.1 (``Content-Length`` and chunked bodies) and the server-sent events inside the
responses, and :func:`wire_trace` gives each ``POST /v1/completions`` a :class:`~batchperf.measure.trace.
RequestTrace` whose ``sent`` is the time the request's first byte crossed the wire and whose chunks are the
times each SSE message's last byte did — so :func:`batchperf.measure.metrics.compute_metrics` gives the wire's
TTFT, TPOT, ITL and E2EL by exactly the client's definitions. IPv4 only (the suite's server listens on
127.0.0.1).
"""

from __future__ import annotations

import bisect
import json
import socket
import struct
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from batchperf.measure.trace import RequestTrace, RunTrace

# --- TCP ---------------------------------------------------------------------------------------------------------

Flow = tuple[str, int, str, int]  # source address, port, destination address, port


@dataclass(slots=True)
class Stream:
    """One direction of a TCP connection: its bytes in order, and when each packet's bytes crossed the wire."""

    data: bytearray = field(default_factory=bytearray)
    starts: list[int] = field(default_factory=list)  # offset of each packet's first byte
    times: list[float] = field(default_factory=list)  # s: that packet's kernel timestamp
    next_seq: int | None = None
    opened: float | None = None  # s: the SYN's time (a new connection on a reused port starts a new stream)

    def time_at(self, offset: int) -> float:
        """When the byte at ``offset`` crossed the wire."""
        return self.times[bisect.bisect_right(self.starts, offset) - 1]

    def add(self, seq: int, payload: bytes, t: float) -> None:
        if self.next_seq is None:
            self.next_seq = seq
        skip = (self.next_seq - seq) % (1 << 32)
        if skip >= len(payload) or skip > (1 << 31):  # all retransmitted, or a gap (ahead): keep what is in order
            if skip > (1 << 31):
                raise ValueError("a TCP segment arrived ahead of a missing one: packets were lost or reordered")
            return
        payload = payload[skip:]
        self.starts.append(len(self.data))
        self.times.append(t)
        self.data += payload
        self.next_seq = (self.next_seq + len(payload)) % (1 << 32)


def tcp_streams(packets: Iterable[tuple[float, bytes]], port: int) -> dict[tuple[Flow, int], Stream]:
    """Each direction of each connection to or from ``port``, keyed by (flow, the connection's number on it)."""
    streams: dict[tuple[Flow, int], Stream] = {}
    generation: dict[Flow, int] = {}
    for t, frame in packets:
        parsed = _tcp(frame)
        if parsed is None:
            continue
        flow, seq, flags, payload = parsed
        if port not in (flow[1], flow[3]):
            continue
        if flags & 0x02:  # SYN: a new connection; its data starts at seq + 1
            generation[flow] = generation.get(flow, -1) + 1
            streams[(flow, generation[flow])] = Stream(next_seq=(seq + 1) % (1 << 32), opened=t)
            continue
        key = (flow, generation.setdefault(flow, 0))
        stream = streams.setdefault(key, Stream())
        if payload:
            stream.add(seq, payload, t)
    return streams


def _tcp(frame: bytes) -> tuple[Flow, int, int, bytes] | None:
    if len(frame) < 34 or frame[12:14] != b"\x08\x00":
        return None
    ip = frame[14:]
    ihl = (ip[0] & 0x0F) * 4
    total = struct.unpack("!H", ip[2:4])[0] or len(ip)  # 0 in a segmentation-offloaded packet: all of it
    if ip[9] != 6:
        return None
    src, dst = socket.inet_ntoa(ip[12:16]), socket.inet_ntoa(ip[16:20])
    tcp = ip[ihl:total]
    sport, dport, seq = struct.unpack("!HHI", tcp[:8])
    offset = (tcp[12] >> 4) * 4
    flags = tcp[13]
    return (src, sport, dst, dport), seq, flags, bytes(tcp[offset:])


# --- HTTP/1.1 and server-sent events ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HttpRequest:
    method: str
    path: str
    body: bytes
    sent: float  # s: its first byte on the wire


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    events: tuple[tuple[float, bytes], ...]  # each SSE message (its text) and when its last byte crossed the wire
    body: bytes
    started: float


def _head(data: bytes, pos: int) -> tuple[list[str], dict[str, str], int] | None:
    end = data.find(b"\r\n\r\n", pos)
    if end < 0:
        return None
    lines = data[pos:end].decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return lines[0].split(" ", 2), headers, end + 4


def http_requests(stream: Stream) -> Iterator[HttpRequest]:
    data, pos = bytes(stream.data), 0
    while (head := _head(data, pos)) is not None:
        start, headers, body_at = head
        length = int(headers.get("content-length", "0"))
        yield HttpRequest(start[0], start[1] if len(start) > 1 else "", data[body_at:body_at + length],
                          stream.time_at(pos))
        pos = body_at + length


def http_responses(stream: Stream) -> Iterator[HttpResponse]:
    data, pos = bytes(stream.data), 0
    while (head := _head(data, pos)) is not None:
        start, headers, at = head
        started = stream.time_at(pos)
        pieces: list[tuple[int, int, int]] = []  # (decoded offset, wire offset, length): where body bytes came from
        body = bytearray()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                eol = data.find(b"\r\n", at)
                if eol < 0:
                    break
                size = int(data[at:eol].split(b";")[0], 16)
                if size == 0:  # the last chunk, then trailers (none from uvicorn) and a blank line
                    at = eol + 4 if data[eol + 2:eol + 4] == b"\r\n" else data.find(b"\r\n\r\n", eol + 2) + 4
                    break
                pieces.append((len(body), eol + 2, size))
                body += data[eol + 2:eol + 2 + size]
                at = eol + 2 + size + 2
        else:
            length = int(headers.get("content-length", str(len(data) - at)))
            pieces.append((0, at, length))
            body += data[at:at + length]
            at += length
        yield HttpResponse(int(start[1]), tuple(_events(bytes(body), pieces, stream)), bytes(body), started)
        pos = at


def _events(body: bytes, pieces: list[tuple[int, int, int]], stream: Stream) -> Iterator[tuple[float, bytes]]:
    """Each SSE message (up to its blank line) and when its last byte crossed the wire."""
    decoded = [p[0] for p in pieces]
    pos = 0
    while (end := body.find(b"\n\n", pos)) >= 0:
        last = end + 1  # the message is complete when its second newline arrives
        i = bisect.bisect_right(decoded, last) - 1
        wire_offset = pieces[i][1] + (last - pieces[i][0])
        yield stream.time_at(wire_offset), body[pos:end]
        pos = end + 2


# --- the wire's request traces ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WireRequest:
    """A streamed completion as the wire saw it (times in s, kernel clock)."""

    prompt: tuple[int, ...]
    sent: float
    chunks: tuple[tuple[float, int], ...]  # (when the message crossed the wire, tokens it carried)
    status: int


def completions(packets: Iterable[tuple[float, bytes]], port: int) -> list[WireRequest]:
    """Every ``POST /v1/completions`` on ``port`` with the server's streamed answer, in the order they were sent."""
    streams = tcp_streams(packets, port)
    out = []
    for (flow, gen), to_server in streams.items():
        if flow[3] != port:
            continue
        back = streams.get(((flow[2], flow[3], flow[0], flow[1]), gen))
        responses = list(http_responses(back)) if back is not None else []
        for i, request in enumerate(http_requests(to_server)):
            if request.method != "POST" or not request.path.startswith("/v1/completions"):
                continue
            response = responses[i] if i < len(responses) else None
            chunks = []
            for t, text in response.events if response is not None else ():
                chunk = _sse_tokens(text)
                if chunk:
                    chunks.append((t, chunk))
            out.append(WireRequest(tuple(json.loads(request.body).get("prompt") or ()), request.sent, tuple(chunks),
                                   response.status if response is not None else 0))
    return sorted(out, key=lambda r: r.sent)


def _sse_tokens(message: bytes) -> int:
    """Tokens an SSE message carries (vLLM's ``token_ids``, else one per choice with text); 0 for others."""
    for line in message.split(b"\n"):
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            return 0
        choices = json.loads(data).get("choices") or []
        if choices:
            ids = choices[0].get("token_ids")
            return 1 if ids is None else len(ids)
    return 0


def wire_trace(requests: list[WireRequest], specs: Mapping[tuple[int, ...], Any], like: RunTrace) -> RunTrace:
    """The run of ``like`` (the client's trace of the same requests) as the wire timed it: requests matched by their
    prompt (``specs``: prompt ids -> the workload's RequestSpec); times from the first measured POST."""
    mine = [r for r in requests if r.prompt in specs]
    if not mine:
        raise ValueError("the capture holds none of the run's requests: was the port right, the capture running?")
    t0 = min(r.sent for r in mine)
    traces = []
    for r in mine:
        spec = specs[r.prompt]
        times = tuple(t - t0 for t, n in r.chunks for _ in range(n))
        error = None if r.status == 200 and times else f"HTTP {r.status}, {len(times)} tokens on the wire"
        traces.append(RequestTrace(spec.request_id, spec.prompt_len, spec.target_len, arrival=r.sent - t0,
                                   scheduled=r.sent - t0, token_times=times, error=error, sent=r.sent - t0,
                                   chunk_sizes=tuple(n for _, n in r.chunks)))
    seen = {t.request_id: t for t in traces}
    for r in like.requests:  # the arbiter must have timed every request the client did, token for token
        if r.error is None and (r.request_id not in seen or seen[r.request_id].output_len != r.output_len):
            got = seen[r.request_id].output_len if r.request_id in seen else "no"
            raise ValueError(f"request {r.request_id}: the client read {r.output_len} tokens, the capture holds {got}: "
                             "the capture missed packets or the run")
    return RunTrace(like.backend, like.batch_size, like.concurrency, sorted(traces, key=lambda t: t.request_id),
                    end=max(t.finished for t in traces))


def chunk_lateness(client: RunTrace, wire: RunTrace) -> list[float]:
    """s, per chunk of every request both saw with the same chunks: how much later the client stamped it than the
    wire, counted from each side's own send (the client's send path plus its read delay)."""
    by_id = {r.request_id: r for r in wire.requests}
    out = []
    for mine in client.requests:
        theirs = by_id.get(mine.request_id)
        if theirs is None or mine.chunk_sizes != theirs.chunk_sizes:
            continue
        out += [(a - mine.start) - (b - theirs.start) for a, b in zip(mine.chunk_times, theirs.chunk_times)]
    return out
