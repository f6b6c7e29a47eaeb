"""The loopback packet capture behind the wire study: every packet of one TCP port with its kernel timestamp.

:func:`open_capture` opens an ``AF_PACKET`` socket on ``lo`` with a classic BPF filter on one TCP port and
``SO_TIMESTAMPNS`` (needs root or ``CAP_NET_RAW``); :func:`capture_main` (run as
``python -m batchperf.telemetry.wire_capture PORT FILE`` in its own process, so that it never competes with the
client for the GIL) writes every packet with its kernel timestamp to a file until SIGTERM; :class:`Capture` runs it
around a cell and reads the file back (:func:`read_capture`). :mod:`batchperf.measure.wire` turns the packets into
the requests' traces.
"""

from __future__ import annotations

import json
import signal
import socket
import struct
import sys
from pathlib import Path
from typing import Any, BinaryIO

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


def capture_refused() -> str | None:
    """Why this process cannot open a packet socket (None: it can): asked before a tool starts anything costly."""
    try:
        socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL)).close()
    except OSError as exc:
        return f"cannot capture packets: {exc.strerror or exc}; {NEEDS}"
    return None


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

        self._child = subprocess.Popen([sys.executable, "-m", "batchperf.telemetry.wire_capture", str(self.port),
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


if __name__ == "__main__":
    raise SystemExit(capture_main(sys.argv[1:]))
