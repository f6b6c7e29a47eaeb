"""No model hub: every connection to a non-loopback address is refused and recorded.

Used two ways: the ``no_hub`` fixture (tests/conftest.py) for code run in the test process, and as a pytest
plugin of a child pytest (``-p no_hub`` with tests/ on PYTHONPATH), together with ``HF_HUB_OFFLINE=1`` and an
empty ``HF_HOME``, so that a run that reached for a hub, or for a model cached from one, fails instead of
passing on this machine's cache or network. Loopback stays open: the vllm-server backend talks to 127.0.0.1.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from typing import Any

ATTEMPTS: list[Any] = []  # every refused address, in this process


def _loopback(address: Any) -> bool:
    host = address[0] if isinstance(address, tuple) else address
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: resolving it is already the network
        return False


def _guard(real: Callable[..., Any]) -> Callable[..., Any]:
    def connect(sock: socket.socket, address: Any, *args: Any) -> Any:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not _loopback(address):
            ATTEMPTS.append(address)
            raise OSError(f"network blocked by tests/support/no_hub.py: nothing may reach a model hub (tried {address})")
        return real(sock, address, *args)

    return connect


def install(setattr_: Callable[[Any, str, Any], None]) -> list[Any]:
    """Block outgoing connections with ``setattr_`` (``monkeypatch.setattr``, or plain ``setattr``)."""
    setattr_(socket.socket, "connect", _guard(socket.socket.connect))
    setattr_(socket.socket, "connect_ex", _guard(socket.socket.connect_ex))
    ATTEMPTS.clear()
    return ATTEMPTS


def pytest_configure(config: Any) -> None:
    """As a plugin of a child pytest: blocked for the whole run."""
    install(setattr)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    terminalreporter.write_line(f"no_hub: {len(ATTEMPTS)} blocked connection attempt(s) {ATTEMPTS}")
