"""Rounds released one at a time by a coordinator: ``batchperf ab --design resident`` (issue 25).

Two resident workers, one per environment, each a pytest process of the same cells, take turns: neither
measures while the other does, and the coordinator decides who goes next (A B B A …), so the two sides' rounds
lie seconds apart instead of a whole process apart.

**The worker's side** (:func:`wait`, called by the suite before each round of a cell, warm-up included, and once
after its last): when ``BATCHPERF_ROUND_GATE`` names a Unix socket, the process connects to it once, says what it
is about to do (``round CELL`` or ``end CELL``, a line) and blocks until the coordinator answers ``go``. Without
the variable it does nothing, so every other run is unchanged. If the coordinator goes away (the connection
ends), the worker stops waiting and runs on ungated. If it never answers (:data:`WAIT_S`: a socket that is no
coordinator's, or one that hangs), the round fails with :class:`GateSilent`, naming the socket, and the worker
runs on ungated: a pytest run is never held forever.

**The coordinator's side** (:class:`RoundCoordinator`, one per worker, not the regression gate): one listening
socket per worker; :meth:`RoundCoordinator.next` waits for the worker to connect (its set-up done) and for its
next line, :meth:`RoundCoordinator.go` releases it (:class:`WorkerGone` when the worker went away). The wait
is outside the timed round (pytest-benchmark's ``setup`` hook), so it is never measured.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

from batchperf.launch.environ import ROUND_GATE_ENV

GO = b"go\n"
# The longest a worker waits for its go: the other side's longest round or model build on the GPU tier is minutes,
# so half an hour of silence means no coordinator is answering.
WAIT_S = 1800.0

_link: list[socket.socket | None] = []  # this process's connection, once made ([None]: the coordinator is gone)


class GateSilent(RuntimeError):
    """The socket that ``BATCHPERF_ROUND_GATE`` names did not answer within :data:`WAIT_S`."""


def wait(what: str) -> None:
    """Say ``what`` (``round CELL`` / ``end CELL``) to the coordinator and wait for its go; no-op without one.
    GateSilent when no go comes within :data:`WAIT_S` (later rounds then run ungated)."""
    path = os.environ.get(ROUND_GATE_ENV)
    if not path:
        return
    if not _link:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(WAIT_S)  # the connect and every read below: a silent socket cannot hold the run forever
        try:
            sock.connect(path)
        except TimeoutError:
            sock.close()
            _link.append(None)
            raise GateSilent(_silent(path, what)) from None
        except OSError:  # no coordinator listens (it is gone): run ungated
            sock.close()
            sock = None
        _link.append(sock)
    sock = _link[0]
    if sock is None:
        return
    try:
        sock.sendall(what.replace("\n", " ").encode() + b"\n")
        answer = _read_line(sock)
    except TimeoutError:
        sock.close()
        _link[0] = None
        raise GateSilent(_silent(path, what)) from None
    except OSError:
        answer = b""
    if answer != GO:  # the coordinator ended the connection: run on, ungated
        sock.close()
        _link[0] = None


def _silent(path: str, what: str) -> str:
    return (f"the round gate {path} (${ROUND_GATE_ENV}) did not answer {what.split(' ', 1)[0]!r} with 'go' within "
            f"{WAIT_S:g} s: no batchperf ab coordinator is answering there (unset {ROUND_GATE_ENV} outside "
            "`batchperf ab`); the rounds after this one run ungated")


def _read_line(sock: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(256)
        if not chunk:
            return b""
        data += chunk
    return data


class WorkerGone(RuntimeError):
    """The worker went away (its process ended, or it closed the connection) before saying anything more."""


class RoundCoordinator:
    """The coordinator's end of one worker's gate: a listening Unix socket at ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(path))
        self._server.listen(1)
        self._conn: socket.socket | None = None
        self._buffer = b""

    def env(self) -> tuple[str, str]:
        """The variable that points a worker at this gate."""
        return ROUND_GATE_ENV, str(self.path)

    def next(self, alive: Callable[[], bool], timeout_s: float) -> str:
        """The worker's next line (``round CELL`` / ``end CELL``), connecting first if needed. WorkerGone when the
        worker ends (``alive()`` false, or the connection closes) or says nothing within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            if time.monotonic() > deadline:
                raise WorkerGone(f"no word from the worker in {timeout_s:.0f} s")
            sock = self._conn or self._accept()
            if sock is None:
                if not alive():
                    raise WorkerGone("the worker ended before it reached its first round")
                continue
            try:
                chunk = sock.recv(256)
            except TimeoutError:
                if not alive():
                    raise WorkerGone("the worker ended") from None
                continue
            except OSError as exc:  # ConnectionResetError: the worker died with the line unread
                raise WorkerGone(f"the worker's connection broke ({exc.strerror})") from None
            if not chunk:
                raise WorkerGone("the worker closed its gate")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode(errors="replace")

    def _accept(self) -> socket.socket | None:
        self._server.settimeout(0.2)
        try:
            conn, _ = self._server.accept()
        except TimeoutError:
            return None
        conn.settimeout(0.2)
        self._conn = conn
        return conn

    def go(self) -> None:
        """Release the worker's next round (or its end); WorkerGone when the worker is gone (killed while it
        waited: the send meets a broken pipe)."""
        if self._conn is None:
            raise WorkerGone("no worker is connected")
        try:
            self._conn.sendall(GO)
        except OSError as exc:  # BrokenPipeError, ConnectionResetError
            raise WorkerGone(f"the worker's connection broke ({exc.strerror})") from None

    def close(self) -> None:
        """Close both sockets (a worker still waiting runs on ungated) and remove the socket file."""
        for sock in (self._conn, self._server):
            if sock is not None:
                sock.close()
        self.path.unlink(missing_ok=True)
