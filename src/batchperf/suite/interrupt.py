"""An interrupted run keeps what it measured: Ctrl-C and SIGTERM write the finished cells, marked incomplete.

Without this, an interrupt inside ``benchmark.pedantic`` left pytest-benchmark a benchmark with no
rounds, whose statistics crashed its JSON save, so not even the finished cells were written; and
SIGTERM (what a CI runner sends on a timeout or a cancel) killed the run on the spot, without a word.

Now SIGTERM is raised as Ctrl-C is (:class:`Terminated`), so pytest stops the same orderly way;
benchmarks of cells that did not finish are left out of the JSON; the results file says the run
is incomplete (``"batchperf_incomplete"`` at its top level, read by
:attr:`batchperf.results.io.ResultsFile.incomplete`), which ``batchperf refresh`` refuses without
``--partial``; and the terminal summary says what was written where. While the results are being
written, SIGINT and SIGTERM wait: the file is never cut half-way. An interrupted run that finished no
cell writes no file: a results file already at the path (an earlier run's) is kept as it was, never
replaced by an empty one.
"""

from __future__ import annotations

import signal
import threading
import warnings
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import pytest

from batchperf.results.io import INCOMPLETE_KEY
from batchperf.results.record import SCHEMA_KEY
from batchperf.suite.matrix import cell_id


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that pytest stops, finishes the session and writes the results."""


@dataclass
class Interrupts:
    """Registered as a plugin object by :func:`pytest_configure`, so its hooks see the session's config."""

    config: pytest.Config
    reason: str | None = None  # set when the run was interrupted
    installed: bool = False  # our SIGTERM handler is in place
    cells: dict[str, str] = field(default_factory=dict)  # nodeid -> cell id, of the cells collected
    written: list[str] = field(default_factory=list)  # cell ids in the results file
    dropped: list[str] = field(default_factory=list)  # cell ids whose measurement did not finish

    # --- signals -----------------------------------------------------------------------------------

    def install(self) -> None:
        # Only over the default: a harness that set its own SIGTERM handler keeps it.
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, self._on_sigterm)
            self.installed = True

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the run at once
        raise Terminated("SIGTERM")

    def uninstall(self) -> None:
        if self.installed and signal.getsignal(signal.SIGTERM) in (self._on_sigterm, signal.SIG_IGN):
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        self.installed = False

    # --- hooks -------------------------------------------------------------------------------------

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        # A signal can land between a library's open() and its `with` (psutil reading /proc/PID/stat while a cell
        # measures): the file is collected unclosed before pytest exits, and under `filterwarnings = error` its
        # ResourceWarning became an error there, exit code 1 and a traceback instead of the interrupted run's 2.
        # What the interrupt left open is expected; a run that was not interrupted still fails on a leak.
        warnings.filterwarnings("ignore", category=ResourceWarning)
        warnings.filterwarnings("ignore", category=pytest.PytestUnraisableExceptionWarning)
        value = excinfo.value
        if isinstance(value, Terminated):
            self.reason = "SIGTERM"
        elif isinstance(value, KeyboardInterrupt):
            self.reason = "SIGINT (Ctrl-C)"
        else:  # pytest.exit()
            self.reason = f"pytest.exit: {getattr(value, 'msg', value)}"

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.cells = {item.nodeid: cid for item in session.items if (cid := cell_id(item))}

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)  # outside pytest-benchmark's own, which writes the JSON
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> Generator[None, None, None]:
        held = _hold_signals()  # the results are being written: an interrupt now would cut the file
        try:
            self._drop_unfinished(session)
            yield
        finally:
            _release_signals(held, keep_sigterm=self.installed)

    def _drop_unfinished(self, session: pytest.Session) -> None:
        """Keep pytest-benchmark from writing (and crashing on) benchmarks of cells that did not finish."""
        bench_session = getattr(session.config, "_benchmarksession", None)
        for bench in getattr(bench_session, "benchmarks", None) or []:
            if bench.has_error:
                continue
            finished_cell = SCHEMA_KEY in (getattr(bench, "extra_info", None) or {})
            # no round at all (an interrupt, or pytest.fail/skip, inside pedantic): its statistics would crash
            # the save; a cell without its record was cut short between its rounds and its record
            if not bench or (self.reason and bench.fullname in self.cells and not finished_cell):
                bench.fixture.has_error = True  # pytest-benchmark writes only benchmarks without an error
                self.dropped.append(self.cells.get(bench.fullname, bench.fullname))
        if self.reason and bench_session is not None and all(b.has_error for b in bench_session.benchmarks):
            # pytest-benchmark would write a file without a cell over whatever PATH held (issue 59, 7)
            bench_session.json = None

    def pytest_benchmark_update_json(self, config: pytest.Config, benchmarks: Any, output_json: dict[str, Any]) -> None:
        self.written = [b["extra_info"]["cell"]["id"] for b in output_json.get("benchmarks", [])
                        if SCHEMA_KEY in (b.get("extra_info") or {})]
        if self.reason:
            unfinished = sorted(set(self.cells.values()) - set(self.written))
            output_json[INCOMPLETE_KEY] = {"reason": f"interrupted by {self.reason}", "cells_written": len(self.written),
                                           "cells_selected": len(self.cells), "unfinished": unfinished}

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.reason:
            return
        path = self.config.getoption("benchmark_json", None)
        terminalreporter.section("batchperf: interrupted")
        unfinished = len(set(self.cells.values()) - set(self.written))
        if path is None:
            where = "not saved (no --benchmark-json)"
        elif not self.written:
            where = f"none finished; {path} not written (a file already there is kept as it was)"
        else:
            where = f"written to {path}, marked incomplete"
        terminalreporter.write_line(f"batchperf: interrupted by {self.reason}: {len(self.written)} finished cell(s) "
                                    f"{where}; {unfinished} of {len(self.cells)} cell(s) unfinished"
                                    + (f" (cut short: {', '.join(self.dropped)})" if self.dropped else ""))
        if self.written and path is not None:
            terminalreporter.write_line("batchperf refresh stores an incomplete run only with --partial "
                                        "(the missing cells keep their old entries)")


_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _hold_signals() -> dict[int, Any]:
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, signal.SIG_IGN) for sig in _SIGNALS}


def _release_signals(held: dict[int, Any], keep_sigterm: bool) -> None:
    for sig, handler in held.items():
        # after the results are written there is nothing left to save: SIGTERM goes back to ending the process
        signal.signal(sig, signal.SIG_DFL if sig == signal.SIGTERM and keep_sigterm else handler)


KEY = pytest.StashKey[Interrupts]()


def pytest_configure(config: pytest.Config) -> None:
    plugin = config.stash[KEY] = Interrupts(config)
    plugin.install()
    config.pluginmanager.register(plugin, "batchperf-interrupts")


def pytest_unconfigure(config: pytest.Config) -> None:
    if KEY in config.stash:
        config.stash[KEY].uninstall()
