"""Progress lines: the counter on a fake clock, and the pytest plugin through pytester."""

from __future__ import annotations

import pytest

from batchperf.suite.progress import CellProgress


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_line_counts_cells_and_estimates_what_is_left():
    clock = FakeClock()
    p = CellProgress(4, clock=clock)
    assert p.line("cell-a", width=8) == "[0/4] ──────── 0% · running cell-a · ETA – · 0:00:00 elapsed"
    clock.t += 30
    p.finish()
    clock.t += 30
    p.finish(failed=True)
    # 60 s for 2 cells: 2 more take 60 s
    assert p.line("cell-c", width=8) == (
        "[2/4] ━━━━──── 50% · running cell-c · ETA 0:01:00 · 0:01:00 elapsed · 1 failed")
    with pytest.raises(ValueError, match="total cells"):
        CellProgress(-1)


CONFTEST = """
from batchperf.suite.progress import add_progress_option, register_progress

def pytest_addoption(parser):
    add_progress_option(parser.addoption)

def pytest_configure(config):
    register_progress(config)
"""

CELLS = """
import pytest

class Cell:
    def __init__(self, id):
        self.id = id

@pytest.mark.parametrize("batchperf_params", [Cell(f"cell-{c}") for c in "abcd"], ids=lambda c: c.id)
def test_cell(batchperf_params):
    if batchperf_params.id == "cell-b":
        pytest.skip("backend unavailable")

def test_not_a_cell():
    pass
"""


def test_plugin_prints_a_line_per_cell_when_on(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_cells=CELLS)
    result = pytester.runpytest("-p", "no:batchperf", "--batchperf-progress=on", "-k", "not cell-d")
    result.assert_outcomes(passed=3, skipped=1, deselected=1)  # a deselected cell is not counted
    result.stdout.fnmatch_lines([
        "*[[]0/3] *0% *running cell-a*",
        "*[[]1/3] *33% *running cell-b*",
        "*[[]2/3] *67% *running cell-c*",  # a skipped cell is done, not failed
        "*[[]3/3] *100% · ETA 0:00:00 · *elapsed",
    ])
    assert "running test_not_a_cell" not in result.stdout.str() and "failed ·" not in result.stdout.str()


@pytest.mark.parametrize("choice", ["off", "auto"])  # pytester's output is not a TTY: auto means off
def test_plugin_is_silent_when_off_or_not_a_tty(pytester, choice):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_cells=CELLS)
    result = pytester.runpytest("-p", "no:batchperf", f"--batchperf-progress={choice}")
    result.assert_outcomes(passed=4, skipped=1)
    assert "running cell-a" not in result.stdout.str()
