"""Read the results JSON that ``pytest --benchmark-json`` writes (see docs/results-schema.md)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from batchperf.suite.cell import SCHEMA_VERSION
from batchperf.measure.trace import RunTrace

REQUIRED = ("cell", "metrics", "rounds", "kv")


class ResultsError(ValueError):
    """A results file is missing, corrupt or not batchperf's; the message names the file and the fix."""


class CellView:
    """Accessors over one cell's ``extra_info`` (``self.info``), shared by every reader of results."""

    __slots__ = ()
    info: dict[str, Any]

    @property
    def cell(self) -> dict[str, Any]:
        return self.info["cell"]

    @property
    def id(self) -> str:
        return str(self.cell["id"])

    @property
    def metrics(self) -> dict[str, float]:
        return self.info.get("metrics", {})

    @property
    def kv(self) -> dict[str, Any]:
        return self.info.get("kv", {})


@dataclass(frozen=True, slots=True)
class CellResult(CellView):
    """One cell of a results file: batchperf's ``extra_info`` plus pytest-benchmark's own fields."""

    name: str  # pytest-benchmark's test name, e.g. test_cell[cpu-tiny-qwen2-hf-static-bs8-p512-c16]
    info: dict[str, Any]  # extra_info
    stats: dict[str, Any]

    @property
    def rounds(self) -> list[dict[str, float]]:
        return self.info["rounds"]

    def traces(self) -> list[RunTrace]:
        return [RunTrace.from_dict(t) for t in self.info.get("traces", [])]


def load_results(path: str | Path) -> list[CellResult]:
    """Every batchperf cell in a pytest-benchmark JSON file, validated."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ResultsError(f"{path}: no such results file; make one with "
                           f"`pytest perf_tests -m cpu --benchmark-json={path}` or `batchperf run`") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{path}: not valid JSON ({exc}); the file is corrupt or truncated — re-run to remake it") from None
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise ResultsError(f"{path}: no 'benchmarks' list; this is not a pytest-benchmark results file")
    cells = []
    for bench in data["benchmarks"]:
        info = bench.get("extra_info") or {}
        if "batchperf_schema" not in info:
            continue  # another plugin's benchmark in the same file
        if info["batchperf_schema"] != SCHEMA_VERSION:
            raise ResultsError(f"{path}: {bench.get('name')}: schema version {info['batchperf_schema']}, this "
                               f"batchperf reads {SCHEMA_VERSION}; re-run the cells with this version")
        missing = [k for k in REQUIRED if k not in info]
        if missing:
            raise ResultsError(f"{path}: {bench.get('name')}: missing {', '.join(missing)} in extra_info; "
                               f"the file was cut or edited — re-run the cells")
        cells.append(CellResult(bench.get("name", "?"), info, bench.get("stats", {})))
    if not cells:
        raise ResultsError(f"{path}: no batchperf cells in it (was it made by `pytest perf_tests`?)")
    return cells
