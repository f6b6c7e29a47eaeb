"""Export reads a tenant's numbers with its name as a key of its own: ``chat.v2`` is exported like ``chat_v2``
(before, the dotted path split the name and its samples were dropped)."""

from __future__ import annotations

from pathlib import Path

from gate_samples import cell_info, copied, results_file

from batchperf.report.export import openmetrics
from batchperf.results.io import read_results


def test_a_dotted_tenant_is_exported_like_any_other(tmp_path: Path) -> None:
    def samples(name: str) -> list[tuple[str, float]]:
        record = copied(cell_info())
        record.tenants = {name: {"attainment": 0.5, "offered": 8, "p99_ttft_ms": 100.0}}
        text = openmetrics(read_results(results_file(tmp_path / f"{name}.json", [record])))
        return sorted(line.rsplit(" ", 1)[0].replace(name, "T") + " " + line.rsplit(" ", 1)[1]
                      for line in text.splitlines() if f'tenant="{name}"' in line)

    plain, dotted = samples("chat_v2"), samples("chat.v2")
    assert plain and dotted == plain
