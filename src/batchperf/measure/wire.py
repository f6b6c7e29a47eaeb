"""The wire as the arbiter: a server cell's requests timed from a loopback packet capture, not by the client.

A client that falls behind stamps tokens when it *reads* them; the kernel stamps each packet when it crosses
the interface. :func:`open_capture` opens an ``AF_PACKET`` socket on ``lo`` with a classic BPF filter on one TCP
port and ``SO_TIMESTAMPNS`` (needs root or ``CAP_NET_RAW``); :func:`capture_main` (run as
``python -m batchperf.measure.wire PORT FILE`` in its own process, so that it never competes with the client
for the GIL) writes every packet with its kernel timestamp to a file until SIGTERM. :func:`wire_traces` then
reassembles each TCP connection, parses HTTP/1.1 (``Content-Length`` and chunked bodies) and the server-sent
events inside the responses, and gives each ``POST /v1/completions`` a :class:`~batchperf.measure.trace.
RequestTrace` whose ``sent`` is the time the request's first byte crossed the wire and whose chunks are the
times each SSE message's last byte did — so :func:`batchperf.measure.metrics.compute_metrics` gives the wire's
TTFT, TPOT, ITL and E2EL by exactly the client's definitions. IPv4 only (the suite's server listens on
127.0.0.1).
"""

from __future__ import annotations

import bisect
import json
import signal
import socket
import struct
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from batchperf.measure.trace import RequestTrace, RunTrace

ETH_P_ALL = 0x0003
SO_TIMESTAMPNS = 35  # linux/asm-generic/socket.h
SO_RCVBUFFORCE = 33
SO_ATTACH_FILTER = 26
SOL_PACKET = 263
PACKET_STATISTICS = 6
PACKET_HOST = 0  # sll_pkttype: a packet to this host; on lo every packet is also seen once as OUTGOING (4)
SNAPLEN = 262144
RECORD = struct.Struct("<qI")  # kernel timestamp (ns, CLOCK_REALTIME), length; then the packet's bytes
NEEDS = "an AF_PACKET socket needs root or CAP_NET_RAW (e.g. sudo setcap cap_net_raw+ep $(readlink -f python))"


# --- capture ---------------------------------------------------------------------------------------------------


def bpf_tcp_port(port: int) -> list[tuple[int, int, int, int]]:
    """Classic BPF (as ``tcpdump -dd 'ip and tcp port PORT'`` on an Ethernet-framed link, which ``lo`` is):
    IPv4, TCP, not a later fragment, source or destination port ``port``; the whole packet is kept."""
    return [
        (0x28, 0, 0, 12),           # ldh [12]: ethertype
        (0x15, 0, 10, 0x0800),      # IPv4, else drop
        (0x30, 0, 0, 23),           # ldb [23]: protocol
        (0x15, 0, 8, 6),            # TCP, else drop
        (0x28, 0, 0, 20),           # ldh [20]: flags and fragment offset
        (0x45, 6, 0, 0x1FFF),       # a later fragment: drop
        (0xB1, 0, 0, 14),           # ldxb 4*([14]&0xf): the IP header's length
        (0x48, 0, 0, 14),           # ldh [x+14]: source port
        (0x15, 2, 0, port),         # ours: keep
        (0x48, 0, 0, 16),           # ldh [x+16]: destination port
        (0x15, 0, 1, port),         # ours: keep, else drop
        (0x06, 0, 0, SNAPLEN),      # keep
        (0x06, 0, 0, 0),            # drop
    ]


def open_capture(port: int, interface: str = "lo") -> socket.socket:
    """A packet socket on ``interface`` that sees only TCP port ``port``, with kernel receive timestamps."""
    import ctypes

    try:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    except PermissionError as exc:
        raise PermissionError(f"cannot capture packets: {exc}; {NEEDS}") from None
    program = bpf_tcp_port(port)
    insns = b"".join(struct.pack("HBBI", *ins) for ins in program)
    buffer = ctypes.create_string_buffer(insns)
    fprog = struct.pack("HL", len(program), ctypes.addressof(buffer))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)  # the kernel copies the program
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 64 << 20)  # a slow reader must not drop packets
    except PermissionError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 20)
    sock.bind((interface, 0))
    return sock


def drops(sock: socket.socket) -> tuple[int, int]:
    """(packets the filter passed, packets dropped for want of buffer) since the last call."""
    packets, dropped = struct.unpack("II", sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
    return packets, dropped


def capture(sock: socket.socket, out: BinaryIO, stop: Any) -> int:
    """Write every received packet (kernel timestamp, bytes) to ``out`` until ``stop()`` is true, then what is still
    queued (a reader starved of CPU on a loaded machine lags its socket by hundreds of ms: the kernel stamped
    those packets on time, they must not be lost); returns the packets read."""
    sock.settimeout(0.2)
    ts_size = struct.calcsize("qq")
    read = 0
    draining = False
    while True:
        if not draining and stop():
            draining = True
            sock.settimeout(0.05)  # the queue is empty once nothing came for this long after the run
        try:
            data, ancdata, _flags, address = sock.recvmsg(SNAPLEN, socket.CMSG_SPACE(ts_size))
        except (TimeoutError, InterruptedError):
            if draining:
                return read
            continue
        read += 1
        if address[2] != PACKET_HOST:
            continue  # lo shows each packet twice: as sent and as received; keep the receipt
        ns = 0
        for level, kind, value in ancdata:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                sec, nsec = struct.unpack("qq", value[:ts_size])
                ns = sec * 1_000_000_000 + nsec
        out.write(RECORD.pack(ns, len(data)))
        out.write(data)


def capture_main(argv: list[str]) -> int:
    """``PORT FILE``: capture until SIGTERM; prints ``ready`` once the socket is open, the drop count at the end."""
    port, path = int(argv[0]), Path(argv[1])
    sock = open_capture(port)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    drops(sock)  # reset the counters
    print("ready", flush=True)
    with path.open("wb") as out:
        read = capture(sock, out, lambda: bool(stopping))
    packets, dropped = drops(sock)
    print(json.dumps({"packets": packets, "dropped": dropped, "read": read}), flush=True)
    return 0


def read_capture(path: Path) -> list[tuple[float, bytes]]:
    """(kernel time in s, packet bytes) of every packet a capture file holds."""
    data = path.read_bytes()
    out, pos = [], 0
    while pos + RECORD.size <= len(data):
        ns, length = RECORD.unpack_from(data, pos)
        pos += RECORD.size
        out.append((ns / 1e9, data[pos:pos + length]))
        pos += length
    return out


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


class Capture:
    """A capture of TCP ``port`` on ``lo`` in a child process (``with Capture(port) as cap: ...``; then
    ``cap.packets`` and ``cap.stats``): the packets it wrote, and the kernel's count of packets passed and dropped."""

    def __init__(self, port: int, workdir: Path, keep: Path | None = None) -> None:
        """``keep``: a folder where the capture file stays (else it is deleted once read)."""
        import itertools

        self.port = port
        self.keep = keep
        folder = keep if keep is not None else workdir
        self.path = next(p for i in itertools.count() if not (p := folder / f"capture-{port}-{i}.bin").exists())
        self.packets: list[tuple[float, bytes]] = []
        self.stats: dict[str, int] = {}
        self._child: Any = None

    def __enter__(self) -> Capture:
        import subprocess

        self._child = subprocess.Popen([sys.executable, "-m", "batchperf.measure.wire", str(self.port),
                                        str(self.path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if self._child.stdout.readline().strip() != "ready":
            self._child.wait()
            raise RuntimeError(f"the packet capture did not start: {self._child.stderr.read().strip()[-2000:]}")
        return self

    def __exit__(self, *exc: object) -> None:
        self._child.terminate()
        out, err = self._child.communicate(timeout=30)
        if self._child.returncode != 0:
            raise RuntimeError(f"the packet capture failed ({self._child.returncode}): {err.strip()[-2000:]}")
        self.stats = json.loads(out.strip().splitlines()[-1])
        if self.stats["dropped"] or self.stats["read"] < self.stats["packets"]:
            raise RuntimeError(f"the packet capture lost packets ({self.stats}): its timings would be wrong")
        self.packets = read_capture(self.path)
        if self.keep is None:
            self.path.unlink(missing_ok=True)


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


if __name__ == "__main__":
    raise SystemExit(capture_main(sys.argv[1:]))
