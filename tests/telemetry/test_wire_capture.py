"""The loopback capture: its filter, and a stop that still writes what the socket had queued."""

from __future__ import annotations

import socket
import struct

from wire_frames import CLIENT_PORT, PORT, frame

from batchperf.telemetry import wire_capture


class QueuedSocket:
    """A packet socket whose queue still holds packets when the capture is told to stop."""

    def __init__(self, frames: list[bytes]) -> None:
        self.frames = list(frames)

    def settimeout(self, value: float) -> None:
        pass

    def recvmsg(self, size: int, ancsize: int):
        if not self.frames:
            raise TimeoutError
        stamp = struct.pack("qq", 100, 5)
        return self.frames.pop(0), [(socket.SOL_SOCKET, wire_capture.SO_TIMESTAMPNS, stamp)], 0, ("lo", 8, 0, 772, b"")


def test_packets_queued_when_the_capture_stops_are_still_written(tmp_path) -> None:
    """A capture starved of CPU lags its socket; stopping must drain the queue, not drop the run's tail."""
    frames = [frame(CLIENT_PORT, PORT, 1, b"x" * i) for i in range(1, 4)]
    with (tmp_path / "c.bin").open("wb") as out:
        assert wire_capture.capture(QueuedSocket(frames), out, stop=lambda: True) == 3
    assert wire_capture.read_capture(tmp_path / "c.bin") == [(100.000000005, f) for f in frames]


def test_the_filter_keeps_the_port_only() -> None:
    program = wire_capture.bpf_tcp_port(PORT)
    assert program[-2] == (0x06, 0, 0, wire_capture.SNAPLEN) and program[-1] == (0x06, 0, 0, 0)
    assert (0x15, 2, 0, PORT) in program and (0x15, 0, 1, PORT) in program
