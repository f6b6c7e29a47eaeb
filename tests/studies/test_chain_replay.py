"""studies/chain-aa/replay_test.py: a recorded run judged again look by look by either test, stopping where it
decides; studies/ab-detector/kept_order.py's statement of what a row resolves."""

from __future__ import annotations

import math
import statistics

from tool_module import tool_module

from batchperf.ab.stats import make_test


def test_a_clear_gain_stops_the_t_at_pair_5_and_signed_rank_at_8() -> None:
    ratios = [1.10, 1.13, 1.09, 1.12, 1.11, 1.14, 1.10, 1.12]  # the 0.28.0 gain, every pair +9% to +14%
    with tool_module("replay_test") as tool:
        t = tool.replay(ratios, make_test("t", 8, 0.05 / 6), 0.03)
        signed = tool.replay(ratios, make_test("signed-rank", 8, 0.05 / 6), 0.03)
    assert (t["call"], t["pairs"]) == ("improvement", 5) and t["interval"][0] > 0
    assert (signed["call"], signed["pairs"]) == ("improvement", 8)


def test_pairs_that_run_out_before_a_decision_are_inconclusive_at_the_last_one() -> None:
    with tool_module("replay_test") as tool:
        row = tool.replay([1.02, 0.97, 1.05, 0.96, 1.01, 0.99], make_test("t", 8, 0.05 / 6), 0.03)
        none = tool.replay([1.1, 1.1, 1.1], make_test("t", 8, 0.05 / 6), 0.03)
    assert (row["call"], row["pairs"]) == ("inconclusive", 6) and row["interval"][0] < 0 < row["interval"][1]
    assert none == {"call": "inconclusive", "pairs": 3, "interval": None}  # no look could decide before pair 5


def test_kept_order_states_the_pooled_interval_and_the_pairs_a_target_needs() -> None:
    pairs = [math.log(1 + x) for x in (0.02, -0.03, 0.01, 0.04, -0.02, 0.0, -0.01, 0.03)]
    mean, sd = statistics.mean(pairs), statistics.stdev(pairs)
    half = 2.3646 * sd / math.sqrt(8)  # t(0.975, 7 degrees of freedom)
    with tool_module("kept_order") as tool:
        line = tool.resolution(pairs, [0.005, -0.01, 0.0], target=0.003)
    assert line.startswith(f"pooled: ln(B/A) {100 * mean:+.2f}% [{100 * (mean - half):+.2f}%, "
                           f"{100 * (mean + half):+.2f}%] (95%, 8 pairs, sd {100 * sd:.2f}%)")
    assert f"needs about {math.ceil((1.96 * sd / 0.003) ** 2)} pairs" in line
    # three verdicts of sd 0.76%: their median inside +-0.3% by chance alone about 45% of the time (normal)
    share = int(line.rsplit("within ±0.3% ", 1)[1].split("%")[0])
    assert "a row of 3 verdicts" in line and 38 <= share <= 52
