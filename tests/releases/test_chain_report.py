"""The chain's table read back (`chain.md`, `batchperf report`'s page): users' strings stay inside their cell."""

from __future__ import annotations

import re

from batchperf.releases.chain import FIRST_LAST, STEP, ChainStep
from batchperf.releases.chain_report import Chain, render_chain_markdown


def step(kind: str, a: int, b: int, cell: str, reason: str = "") -> ChainStep:
    s = ChainStep(kind, a, b, "f", exit_code=0, status="done", reason=reason, pairs=6, minutes=1.0)
    s.cells = {cell: {"verdict": "no change", "note": "", "metrics": {}}}
    return s


def test_a_label_holding_a_bar_or_a_newline_keeps_the_table_s_rows_whole() -> None:
    """Seen (issue 59): a label `0.31|rc` or `0.31\\nrc` broke chain.md's table (an extra column, a row cut in two)."""
    labels = ("0.30|old", "0.31\nrc", "0.32")
    chain = Chain(labels, (step(STEP, 0, 1, "c|1"), step(STEP, 1, 2, "c|1", reason="pair 2:\n| failed"),
                           step(FIRST_LAST, 0, 2, "c|1")), "done")
    table = [line for line in render_chain_markdown(chain).splitlines() if line.startswith("|")]
    columns = [len(re.split(r"(?<!\\)\|", row)) for row in table]  # a '|' not escaped ends a column
    assert len(table) == 2 + 4  # header, rule, three steps and one "why" row: no row cut by a line break
    assert set(columns) == {columns[0]}
    rows = table[2:]
    assert rows[0].startswith("| 0.30\\|old -> 0.31 rc | c\\|1 |")
    assert "why: pair 2: \\| failed" in rows[2]
