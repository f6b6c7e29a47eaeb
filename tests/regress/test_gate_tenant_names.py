"""A tenant's name is a key of its own (STYLE.md rule 15): ``chat.v2`` is judged and exported like ``chat_v2``.

Before, the gate spelled a tenant's path as ``tenants.chat.v2.attainment`` and split it at the dots: the tenant
was never found, its attainment falling from 100% to 0% was no regression, and export dropped its samples."""

from __future__ import annotations

from pathlib import Path

import pytest
from gate_samples import cell_info, copied, results_file

from batchperf.cli import main
from batchperf.regress.gate import compare_cell
from batchperf.results.record import CellRecord


def with_tenant(name: str, attainment: float) -> CellRecord:
    """One tenant's attainment moves; the cell-wide one stays, so only the per-tenant rule can see the change."""
    out = copied(cell_info())
    out.slo = {"attainment": 0.9, "request_goodput": 10.0, "offered": 80, "met": 72}
    out.tenants = {name: {"attainment": attainment, "offered": 8, "p99_ttft_ms": 100.0}}
    return out


@pytest.mark.parametrize("name", ["chat_v2", "chat.v2", "a.b.c", "."])
def test_a_dotted_tenant_is_judged_like_any_other(name: str) -> None:
    verdict = compare_cell("c", with_tenant(name, 1.0), with_tenant(name, 0.0))
    by_metric = {m.metric: m.verdict.value for m in verdict.metrics}
    plain = {m.metric.replace("chat_v2", name): m.verdict.value
             for m in compare_cell("c", with_tenant("chat_v2", 1.0), with_tenant("chat_v2", 0.0)).metrics}
    assert by_metric == plain
    assert by_metric[f"tenants.attainment[{name}]"] == "regression"


@pytest.mark.parametrize("name", ["chat_v2", "chat.v2"])
def test_compare_fails_on_a_dotted_tenants_regression(tmp_path: Path, name: str) -> None:
    before = results_file(tmp_path / "before.json", [with_tenant(name, 1.0)])
    after = results_file(tmp_path / "after.json", [with_tenant(name, 0.0)])
    assert main(["compare", str(before), str(after), "--fail-on-regression"]) == 1


@pytest.mark.parametrize("name", ["chat.v2", "a.b[c]", "v1.0 [beta]"])
def test_compare_shows_a_dotted_tenants_row_by_its_whole_name(tmp_path: Path, name: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    # issue 59: the row of tenant chat.v2 read "v2]", the label cut at the tenant's dot
    before = results_file(tmp_path / "before.json", [with_tenant(name, 1.0)])
    after = results_file(tmp_path / "after.json", [with_tenant(name, 0.0)])
    assert main(["compare", str(before), str(after), "--markdown", str(tmp_path / "table.md")]) == 0
    assert f"| **attainment[{name}]** |" in (tmp_path / "table.md").read_text()  # a regression: bold
    assert f"attainment[{name}]" in capsys.readouterr().out
