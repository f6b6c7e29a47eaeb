"""ab's exact metrics (KV bytes): equality where the figure is repeatable, and no verdict where it is not.

On a cell whose batches depend on timing (hf-static forming static batches from what has arrived, on a
trace), the KV bytes a request held move with a process's speed (the same in every round of one process:
1,264,640 B at full speed, 1,262,933 B with a 30% injected slowdown); one pair was enough for a KV "regression".
Now a difference must repeat over two pairs, and a figure that moves within one environment is not judged; and
on such a cell (a padded layout under open-loop arrivals) the figure never decides, as the gate never gates it:
a B faster in every process would otherwise repeat its own figure and read as a KV "regression".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from paths import DATA

from batchperf.ab.cell import CellState, PairSeries
from batchperf.ab.env import Environment
from batchperf.ab.judging import add_pair, exact_call, judge_cell
from batchperf.ab.settings import Settings
from batchperf.ab.stats import make_test
from batchperf.measure.catalogue import Direction
from batchperf.measure.kv import PADDED_LAYOUT
from batchperf.regress.verdict import Verdict
from batchperf.results.io import read_results
from batchperf.results.record import CellRecord

KV = "kv_bytes_per_request_mean"


def test_equal_in_every_pair_is_no_change() -> None:
    assert exact_call([178176.0] * 3, [178176.0] * 3) == (Verdict.NO_CHANGE, "")


def test_a_repeatable_difference_is_a_regression_once_a_second_pair_confirms_it() -> None:
    call, note = exact_call([178176.0], [180224.0])
    assert call is Verdict.INCONCLUSIVE and "second pair" in note
    assert exact_call([178176.0] * 2, [180224.0] * 2) == (Verdict.REGRESSION, "")


def test_a_figure_that_moves_within_one_environment_is_not_judged_and_says_why() -> None:
    call, note = exact_call([1262933.0, 1262933.0], [1274368.0, 1262933.0])  # B's own processes differ
    assert call is Verdict.NOT_JUDGED and note.startswith("differs between B's own processes")
    call, note = exact_call([1262933.0, 1270000.0], [1274368.0, 1271000.0])
    assert call is Verdict.NOT_JUDGED and "A and B's own processes" in note


def test_a_timing_dependent_kv_figure_no_longer_decides_the_cell() -> None:
    """Throughput says no change; the KV figure wanders in both environments: the cell is no change, and the KV
    row is reported as not judged, with its note."""
    cell = CellState("c", "n")
    cell.metrics["output_throughput"] = PairSeries("output_throughput", Direction.HIGHER, True, 0.03,
                                                   a=[100.0] * 12, b=[100.0 + 0.1 * (i % 3 - 1) for i in range(12)])
    cell.metrics[KV] = PairSeries(KV, Direction.EXACT, True, 0.0, a=[1262933.0 + 7 * (i % 2) for i in range(12)],
                                  b=[1274368.0 - 5 * (i % 2) for i in range(12)])
    judge_cell(cell, make_test("signed-rank", 14, 0.05), 12)
    assert cell.verdict is Verdict.NO_CHANGE
    kv = next(m for m in cell.cell_verdict().metrics if m.metric == KV)
    assert kv.verdict is Verdict.NOT_JUDGED and not kv.deciding and "depends on timing" in kv.note
    assert cell.to_dict()["metrics"][1]["note"] == kv.note


def _padded(open_loop: bool, per_request: float, throughput: float) -> object:
    record = read_results(DATA / "results_cpu_small.json").records[0]
    kv = {**record.kv, "kv_layout": PADDED_LAYOUT, "kv_bytes_per_request_mean": per_request}
    return replace(record, kv=kv, workload={**record.workload, "open_loop": open_loop},
                   metrics={**record.metrics, "output_throughput": throughput},
                   counters={**record.counters, "padding_waste": per_request / 4e7})  # moves with the KV figure


def _judged(a: Callable[[int], CellRecord], b: Callable[[int], CellRecord], pairs: int, max_pairs: int) -> CellState:
    """A cell judged by signed-rank at alpha 0.05 over ``pairs`` pairs, pair ``i`` being ``a(i)`` against ``b(i)``."""
    env = Environment("A", DATA)
    settings = Settings(env, replace(env, label="B"), (), DATA)
    cell = CellState("c", "n")
    for index in range(1, pairs + 1):
        add_pair(cell, settings, a(index), b(index), index)
    judge_cell(cell, make_test("signed-rank", max_pairs, 0.05), pairs)
    return cell


def test_a_kv_figure_set_by_open_loop_arrivals_is_reported_never_deciding_and_says_why() -> None:
    """B faster in every process, each side repeating its own KV figure: throughput decides (improvement) and the
    KV row is reported with the gate's reason; under closed-loop arrivals the same difference is a regression."""
    verdicts = {open_loop: _judged(lambda i, o=open_loop: _padded(o, 1262933.0, 100.0 + i % 3),
                                   lambda i, o=open_loop: _padded(o, 1264640.0, 120.0 + i % 3), 12, 14)
                for open_loop in (True, False)}
    kv = verdicts[True].metrics[KV]
    assert verdicts[True].verdict is Verdict.IMPROVEMENT and not kv.deciding and kv.call is Verdict.REGRESSION
    shown = {m.metric: m for m in verdicts[True].cell_verdict().metrics}
    for name in (KV, "padding_waste"):  # every figure the rule covers says why, not only the exact one
        assert not shown[name].deciding and "depends on arrival timing" in shown[name].note, name
    assert verdicts[False].verdict is Verdict.REGRESSION and verdicts[False].metrics[KV].deciding


def test_open_loop_throughput_says_what_its_verdict_does_not_say() -> None:
    """A two-tenant cell's output tok/s gave B/A = 1.0000 in every pair of a release chain: the arrivals set it.
    Its row says so, and names latency; a closed-loop cell's row has no such note."""
    notes = {}
    for open_loop in (True, False):
        record = _padded(open_loop, 1262933.0, 100.0)  # both sides alike in every pair
        cell = _judged(lambda _: record, lambda _: record, 6, 6)
        notes[open_loop] = {m.metric: m.note for m in cell.cell_verdict().metrics}
    assert "open loop: the arrivals set this throughput" in notes[True]["output_throughput"]
    assert "--metrics p99_ttft_ms" in notes[True]["output_throughput"]
    assert "open loop" not in notes[False]["output_throughput"]
    assert all("open loop" not in note for name, note in notes[True].items() if not name.endswith("_throughput"))
