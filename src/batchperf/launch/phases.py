"""Where a measuring process's wall seconds go: a pytest plugin that timestamps its phases (opt-in).

Loaded with ``-p batchperf.launch.phases`` and told where to write by ``BATCHPERF_PHASES=FILE`` (without the
variable it records nothing), it writes one JSON object at the very end of the session: wall-clock
``time.time()`` stamps, so the parent that started the process can put its own (start, end) beside them.

- ``process_start``: when the kernel made the process (``/proc``), i.e. after the parent's fork;
- ``plugin_imported``: when this module was imported (pytest loads ``-p`` plugins in order: name this one
  first and everything before it is the interpreter's start-up and pytest's own import);
- ``configured``: ``pytest_configure`` (the other plugins and the conftests are imported);
- ``collection_start`` / ``collection_finish``: collecting ``perf_tests`` (importing the test modules, and
  generating the matrix of cells);
- per test, ``setup_start``/``setup_end`` (fixtures: the model's build or load, the backend's start; each
  fixture's seconds in ``fixtures``: the first to import torch and transformers pays for it),
  ``call_start``/``call_end`` (warm-up rounds, measured rounds, the record, the gate) and
  ``teardown_end``;
- ``unconfigure``: the session's end (pytest-benchmark's results file is written just before it).

``studies/ab-noise/ab_noise.py`` reads it, with the measured rounds' own total time from the results file, to split a
process into start-up, imports, collection, model build, warm-up and measuring.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pytest

from batchperf.launch.environ import PHASES_ENV

IMPORTED = time.time()
_stamps: dict[str, Any] = {"plugin_imported": IMPORTED, "tests": []}


def _process_start() -> float | None:
    """When the kernel started this process, to 10 ms (``/proc``: boot-relative start tick against the uptime;
    psutil's create_time adds the boot time, rounded to a whole second)."""
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            ticks = int(fh.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        with open("/proc/uptime", encoding="ascii") as fh:
            uptime = float(fh.read().split()[0])
        now = time.time()
        return now - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):  # not Linux: a missing stamp, not a failed run
        return None


def pytest_configure(config: pytest.Config) -> None:
    _stamps["configured"] = time.time()


def pytest_collection(session: pytest.Session) -> None:
    _stamps["collection_start"] = time.time()


def pytest_collection_finish(session: pytest.Session) -> None:
    _stamps["collection_finish"] = time.time()
    _stamps["collected"] = len(session.items)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    _stamps["tests"].append({"nodeid": item.nodeid})
    yield
    _stamps["tests"][-1]["teardown_end"] = time.time()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Any:
    _stamps["tests"][-1]["setup_start"] = time.time()
    yield
    _stamps["tests"][-1]["setup_end"] = time.time()


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef: Any, request: Any) -> Any:
    start = time.time()
    yield
    if _stamps["tests"]:
        _stamps["tests"][-1].setdefault("fixtures", {})[fixturedef.argname] = time.time() - start


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    _stamps["tests"][-1]["call_start"] = time.time()
    yield
    _stamps["tests"][-1]["call_end"] = time.time()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    target = os.environ.get(PHASES_ENV)
    if not target:
        return
    _stamps["unconfigure"] = time.time()
    _stamps["process_start"] = _process_start()
    tmp = f"{target}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(_stamps, fh)
    os.replace(tmp, target)
