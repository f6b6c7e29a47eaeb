"""The report: the knee rule on hand-made curves, and the page built from results files."""

from __future__ import annotations

import math

import pytest

from batchperf.report.knee import knee


def test_knee_is_the_smallest_batch_reaching_90_percent_of_the_max():
    assert knee([1, 4, 8, 16, 32], [100, 300, 450, 480, 490]) == 8  # 90% of 490 = 441
    assert knee([32, 1, 16, 4, 8], [490, 100, 480, 300, 450]) == 8  # order does not matter
    assert knee([1, 4, 8], [100, 300, 440]) == 8  # still rising: the last point
    assert knee([1, 4, 8, 16], [200, 400, 390, 395]) == 4  # past the peak: where it was first reached
    assert knee([1, 2], [100, 100]) == 1  # flat: batching buys nothing
    assert knee([1, 4, 8], [100, 300, 400], fraction=0.5) == 4


def test_knee_edge_cases():
    assert knee([], []) is None
    assert knee([8], [123.0]) == 8
    assert knee([1, 4, 8], [100, math.nan, 150]) == 8  # a missing point is skipped
    assert knee([1, 4], [None, math.nan]) is None
    with pytest.raises(ValueError, match="fraction"):
        knee([1], [1], fraction=0)
    with pytest.raises(ValueError, match="differ in length"):
        knee([1, 2], [1])
