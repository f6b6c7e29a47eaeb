"""The machine probe beside every session of the suite (:mod:`batchperf.telemetry.probe`).

When a session has cells to run, the machine is probed before the first (``pytest_runtestloop``) and after the
last (``pytest_sessionfinish``, outside pytest-benchmark's own, which writes the JSON); both go into the results
file as ``machine_info.batchperf_probe`` (:data:`batchperf.regress.machine.PROBE_KEY`), through pytest-benchmark's
``pytest_benchmark_update_machine_info``. A session without cells (the unit tests) probes nothing. Loaded by
``batchperf.suite.plugin``.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import replace
from typing import Any

import pytest

from batchperf.regress.machine import PROBE_KEY, SessionProbes
from batchperf.telemetry.probe import probe

PROBES = pytest.StashKey[SessionProbes]()
CELL_FIXTURE = "batchperf_params"  # what every cell's test takes (suite.plugin.pytest_generate_tests)


def has_cells(items: list[pytest.Item]) -> bool:
    return any(CELL_FIXTURE in getattr(item, "fixturenames", ()) for item in items)


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    if has_cells(session.items) and not session.config.option.collectonly:
        session.config.stash[PROBES] = SessionProbes(start=probe())


@pytest.hookimpl(hookwrapper=True, tryfirst=True)  # before pytest-benchmark's wrapper writes the results
def pytest_sessionfinish(session: pytest.Session) -> Generator[None, None, None]:
    probes = session.config.stash.get(PROBES, None)
    if probes is not None:
        session.config.stash[PROBES] = replace(probes, end=probe())
    yield


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    if (probes := config.stash.get(PROBES, None)) is not None:
        machine_info[PROBE_KEY] = probes.to_dict()
