"""studies/ab-tests/ab_tests_compare.py judges every simulated sequence at once; its intervals must be the tests' own."""

from __future__ import annotations

import numpy as np
import pytest
from tool_module import tool_module

from batchperf.ab.stats import TESTS, make_test


@pytest.fixture(scope="module")
def tool():
    with tool_module("ab_tests_compare") as module:
        yield module


@pytest.mark.parametrize("test", TESTS)
def test_the_vectorised_intervals_are_the_judge_s_own(tool, test: str, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("BATCHPERF_CACHE", str(tmp_path))
    judge = make_test(test, 12, 0.05)
    data = np.random.default_rng(5).normal(-0.05, 0.07, (15, 12))
    for n in range(1, 13):
        low, high = tool.intervals(judge, data, n)
        for k in range(len(data)):
            iv = judge.interval(data[k, :n])
            assert (low[k], high[k]) == (pytest.approx(iv.low), pytest.approx(iv.high))


def test_a_clear_slowdown_is_caught_and_the_null_mostly_is_not(tool, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("BATCHPERF_CACHE", str(tmp_path))
    judge = make_test("signed-rank", 14, 0.05)
    slow = tool.simulate(judge, np.log(0.8) + np.random.default_rng(1).normal(0, 0.02, (200, 14)), 0.03)
    assert slow["regression"] == 1.0 and slow["pairs"] == judge.needs
    null = tool.simulate(judge, np.random.default_rng(2).normal(0, 0.07, (2000, 14)), 0.03)
    assert null["regression"] < 0.05
