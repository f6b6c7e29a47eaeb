"""Progress of a long run on the terminal: cells done / total, elapsed, ETA, and the cell running now.

pytest captures what tests print, so the line is written from the
``pytest_runtest_logstart`` hook, which runs between tests while capture is
suspended, through pytest's own terminal reporter (so it never tangles with
pytest's output, and rich or tqdm's cursor tricks are not needed). One line
per cell, so it reads the same in a CI log as on a terminal. On by default only when the terminal is a TTY;
``--batchperf-progress=on|off`` overrides.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from typing import Any

from batchperf.suite.matrix import cell_id

OPTION = "batchperf_progress"


def add_progress_option(add: Any) -> None:
    add("--batchperf-progress", dest=OPTION, choices=("auto", "on", "off"), default="auto",
        help="one progress line per performance cell (cells done / total, ETA, the current cell); "
             "auto: only on a TTY")


class CellProgress:
    """Counts cells and renders the progress line; knows nothing of pytest."""

    def __init__(self, total: int, clock: Callable[[], float] = time.monotonic) -> None:
        if total < 0:
            raise ValueError(f"total cells must be >= 0, got {total}")
        self.total = total
        self.done = 0
        self.failed = 0
        self.clock = clock
        self.t0 = clock()

    def finish(self, failed: bool = False) -> None:
        self.done += 1
        self.failed += failed

    def eta_s(self) -> float | None:
        """Seconds left at the mean pace of the cells done so far; None before the first."""
        if not self.done:
            return None
        return (self.clock() - self.t0) / self.done * (self.total - self.done)

    def line(self, running: str | None, width: int = 16) -> str:
        """Plain text: ``[3/24] ━━━──── 12% · running <cell> · ETA 0:07:50 · 0:01:05 elapsed``."""
        frac = self.done / self.total if self.total else 1.0
        filled = round(frac * width)
        bar = "━" * filled + "─" * (width - filled)
        eta = self.eta_s()
        # the cell comes first after the bar: on a narrow terminal the line is cut from the right
        parts = [f"[{self.done}/{self.total}] {bar} {frac:.0%}"]
        if running:
            parts.append(f"running {running}")
        parts += [f"ETA {_hms(eta)}" if eta is not None else "ETA –", f"{_hms(self.clock() - self.t0)} elapsed"]
        if self.failed:
            parts.append(f"{self.failed} failed")
        return " · ".join(parts)


def _hms(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class ProgressPlugin:
    """The pytest side: counts the collected cells, prints a line as each one starts."""

    def __init__(self, config: Any, choice: str) -> None:
        self.config = config
        self.choice = choice
        self.terminal: Any = None
        self.progress: CellProgress | None = None
        self.ids: dict[str, str] = {}  # nodeid -> cell id

    def pytest_collection_finish(self, session: Any) -> None:
        # session.items is what will run: after -m / -k deselection
        self.ids = {item.nodeid: cid for item in session.items if (cid := cell_id(item)) is not None}

    def pytest_runtestloop(self) -> None:
        # the terminal reporter exists by now (it may not when plugins configure)
        self.terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        if self.terminal is not None and (self.choice == "on" or self.terminal.isatty()):
            self.progress = CellProgress(len(self.ids))

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        if self.progress is not None and nodeid in self.ids:
            self._write(self.progress.line(self.ids[nodeid]))

    def pytest_runtest_logreport(self, report: Any) -> None:
        if self.progress is None or report.nodeid not in self.ids:
            return
        if report.when == "call" or (report.when == "setup" and not report.passed):
            self.progress.finish(failed=report.failed)  # a skip or error in setup ends the cell too

    def pytest_sessionfinish(self) -> None:
        if self.progress is not None and self.progress.total:
            self._write(self.progress.line(None))

    def _write(self, text: str) -> None:
        width = shutil.get_terminal_size().columns - 1
        if len(text) > width:  # one line, always: a wrapped bar is unreadable
            text = text[: width - 1] + "…"
        self.terminal.ensure_newline()
        self.terminal.write_line(text, cyan=True, bold=True)  # colour only on a terminal


def register_progress(config: Any) -> None:
    """Add the progress plugin unless turned off; with ``auto`` it stays silent off a TTY."""
    choice = config.getoption(OPTION, "auto")
    if choice != "off":
        config.pluginmanager.register(ProgressPlugin(config, choice), "batchperf-progress")
