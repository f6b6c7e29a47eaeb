"""The release-over-release plot of a chain: each step's interval and the level against the first release, drawn
from a chain folder by `batchperf report` (labels are users' strings: never math text)."""

from __future__ import annotations

import json
from pathlib import Path

from batchperf.cli import main
from batchperf.releases.chain_report import Level
from batchperf.report.chain_plots import file_name, release_plot

LABELS = ("0.27.1", "0.28.0", "$0.29$ rc", "0.30.0")


def cell(estimate: float, low: float, high: float, verdict: str) -> dict:
    return {"verdict": verdict, "note": "", "metrics": {"output_throughput": {
        "deciding": True, "call": verdict, "pairs": 9, "margin": 0.03, "estimate": estimate, "low": low,
        "high": high, "a_median": 100.0, "b_median": 100.0 * (1 + estimate)}}}


def chain_folder(tmp_path: Path) -> Path:
    """A chain.json as `batchperf chain` writes it: a no-change step, a regression, a failed step, first -> last."""
    cid = "vllm-bs16-p512-c16"
    steps = [
        {"kind": "step", "a": 0, "b": 1, "folder": "step-01", "exit_code": 0, "status": "done", "pairs": 9,
         "minutes": 6.0, "cells": {cid: cell(0.004, -0.01, 0.02, "no change")}},
        {"kind": "step", "a": 1, "b": 2, "folder": "step-02", "exit_code": 1, "status": "done", "pairs": 8,
         "minutes": 5.5, "cells": {cid: cell(-0.08, -0.11, -0.05, "regression")}},
        {"kind": "step", "a": 2, "b": 3, "folder": "step-03", "exit_code": 4, "status": "failed", "pairs": 1,
         "minutes": 1.0, "reason": "environment B failed to run in pair 1", "cells": {}},
        {"kind": "first-last", "a": 0, "b": 3, "folder": "first-last", "exit_code": 1, "status": "done",
         "pairs": 8, "minutes": 5.0, "cells": {cid: cell(-0.07, -0.1, -0.04, "regression")}},
    ]
    folder = tmp_path / "chain"
    folder.mkdir()
    (folder / "chain.json").write_text(json.dumps({
        "batchperf_chain": 1, "status": "done", "exit_code": 1, "settings": {},
        "environments": [{"label": label, "python": f"/v/{i}/bin/python", "dir": "/repo", "vars": {}}
                         for i, label in enumerate(LABELS)], "steps": steps}))
    return folder


def test_release_plot_draws_steps_levels_and_math_looking_labels_as_text(tmp_path: Path) -> None:
    level = Level("cell $x$", "output_throughput", LABELS, ((0.0, -0.01, 0.02), (-0.08, -0.11, -0.05), None),
                  ("no change", "regression", "failed"), (0.0, 0.0, -0.08, None), (-0.07, -0.1, -0.04), "regression",
                  0.03)
    path = release_plot(level, tmp_path / file_name(level.cell))
    assert path.name.startswith("chain-cell__x_-") and path.read_bytes().startswith(b"\x89PNG")


def test_cell_ids_that_differ_only_in_other_characters_get_files_of_their_own() -> None:
    """Seen (issue 59): `a/b` and `a:b` both drew chain-a_b.png, the second plot replacing the first."""
    names = {file_name(c) for c in ("bs4/p64", "bs4:p64", "bs4_p64", "x" * 400)}
    assert len(names) == 4 and file_name("bs4_p64") == "chain-bs4_p64.png"  # a plain id keeps its plain name
    assert all(len(n.encode()) <= 255 for n in names)


def test_report_of_a_chain_folder_writes_one_plot_per_cell_and_the_table(tmp_path: Path, capsys) -> None:
    out = tmp_path / "report"
    assert main(["report", str(chain_folder(tmp_path)), "--out", str(out)]) == 0
    assert (out / "chain-vllm-bs16-p512-c16.png").read_bytes().startswith(b"\x89PNG")
    page = (out / "index.html").read_text()
    assert "chain-vllm-bs16-p512-c16.png" in page and "0.28.0 -&gt; $0.29$ rc" in page and "REGRESSION" in page
    assert "product -8.0%; measured -7.0% [-10.0%, -4.0%]" not in page  # the failed step leaves no product
    assert "product -; measured -7.0% [-10.0%, -4.0%]" in page


def test_report_of_a_chain_beside_results_files_writes_both_pages(tmp_path: Path) -> None:
    from paths import DATA

    out = tmp_path / "report"
    assert main(["report", str(DATA / "results_cpu_small.json"), str(chain_folder(tmp_path) / "chain.json"),
                 "--out", str(out)]) == 0
    assert (out / "index.html").is_file() and "batchperf chain" in (out / "chain.html").read_text()


def test_a_call_not_confirmed_is_drawn_hollow_and_says_so(tmp_path: Path) -> None:
    from batchperf.report.chain_plots import marked

    assert marked("regression", False) == ("regression (not confirmed)", "white")
    assert marked("regression", True) == ("regression (confirmed)", "")
    assert marked("no change", None) == ("no change", "")
    level = Level("cell", "output_throughput", LABELS, ((0.0, -0.01, 0.02), (-0.08, -0.11, -0.05), None),
                  ("no change", "regression", "failed"), (0.0, 0.0, -0.08, None), (-0.07, -0.1, -0.04), "regression",
                  0.03, (None, False, None), True)
    assert release_plot(level, tmp_path / "c.png").read_bytes().startswith(b"\x89PNG")


def test_a_chain_made_before_confirmations_reads_back_without_them(tmp_path: Path) -> None:
    """The committed chains (docs/data/chain-*) have calls and no confirmation: finished, not pending."""
    from batchperf.releases.chain_report import load, render_chain_markdown

    table = render_chain_markdown(load([chain_folder(tmp_path)]))
    assert table.count("not measured again (a chain made before chains confirmed their calls)") == 2
    assert "pending" not in table and "| no change | - |" in table
