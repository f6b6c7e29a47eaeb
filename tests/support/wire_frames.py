"""Ethernet/IPv4/TCP frames as the loopback interface carries them, for the wire tests."""

from __future__ import annotations

import socket
import struct

PORT, CLIENT_PORT = 8000, 40000


def frame(sport: int, dport: int, seq: int, payload: bytes = b"", flags: int = 0x18) -> bytes:
    """An Ethernet/IPv4/TCP frame as lo carries it (zero MACs)."""
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, 0, 5 << 4, flags, 65535, 0, 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 0, 0, 64, 6, 0, socket.inet_aton("127.0.0.1"),
                     socket.inet_aton("127.0.0.1"))
    return b"\0" * 12 + b"\x08\x00" + ip + tcp
