"""The suite's "KV-cache growth" check: one test item at the end of the session, over the cells that ran.

Per model × backend, the slope of measured KV bytes per request over tokens
held must equal the analytic bytes per token (:mod:`batchperf.measure.kv_growth`).
The item is appended to the collected tests by a trylast
``pytest_collection_modifyitems``, i.e. after ``-k``/``-m`` deselection and
after ``--batchperf-shard``, whenever at least one performance cell is
selected; so it always runs last, whatever the files are called, and it fits
exactly the cells this session ran; traffic cells are left out of the fit, said so in the summary, and a session
of traffic cells only is skipped, never passed (:mod:`batchperf.measure.kv_growth`). Loaded by
``batchperf.suite.plugin``.
"""

from __future__ import annotations

from typing import Any

import pytest

from batchperf.measure.kv_growth import DEFAULT_REL_TOL, kv_growth
from batchperf.suite.matrix import cell_id
from batchperf.suite.plugin import state

NAME = "kv_cache_growth"
NODE_ID = f"batchperf::{NAME}"  # no file holds it; "batchperf" is what the terminal shows as its place
LINES = pytest.StashKey[list[str]]()  # the fits and the reasons for groups left unfitted, for the summary


class KVGrowthMismatch(Exception):
    """A fitted slope disagrees with the analytic bytes per token (reported without a traceback)."""


class KVGrowthCheck(pytest.Item):
    def runtest(self) -> None:
        records = state(self.config).records
        if not records:
            pytest.skip("KV-cache growth: no performance cell ran in this session, so there is nothing to fit")
        try:
            fits, unfit = kv_growth(r.kv_point() for r in records)
        except ValueError as exc:  # e.g. cells of one model × backend disagree on the analytic value
            raise KVGrowthMismatch(f"KV-cache growth cannot be checked: {exc}") from None
        self.config.stash[LINES] = [f.describe() for f in fits] + unfit
        if not fits:
            pytest.skip("; ".join(unfit))
        if bad := [f for f in fits if not f.agrees()]:
            raise KVGrowthMismatch(f"KV-cache growth differs from the analytic bytes/token by more than "
                                   f"{DEFAULT_REL_TOL:.0%}:\n" + "\n".join(f.describe() for f in bad))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, KVGrowthMismatch):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, f"batchperf: {NAME} over the cells of this session"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    if any(cell_id(item) is not None for item in items):
        items.append(KVGrowthCheck.from_parent(session, name=NAME, nodeid=NODE_ID))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if lines := config.stash.get(LINES, None):
        terminalreporter.ensure_newline()  # before the title, or the first line after it comes out blank
        terminalreporter.section("batchperf KV-cache growth")
        for line in lines:
            terminalreporter.write_line(line)
