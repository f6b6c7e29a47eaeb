"""Cells of one or more results files, each named by its file: what the report and the recommender read.

:mod:`batchperf.results.record` reads and validates a file; this adds the run (file)
a cell came from and typed accessors for the cell parameters, so several runs
(before/after an upgrade) can be drawn side by side.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from batchperf.results.record import CellView, load_results


@dataclass(frozen=True, slots=True)
class CellRecord(CellView):
    """One cell's ``extra_info``, with the file it came from."""

    source: str  # the results file's name (stem), to tell runs apart
    info: dict[str, Any]  # extra_info

    @property
    def model(self) -> str:
        return str(self.cell["model"])

    @property
    def backend(self) -> str:
        return str(self.cell["backend"])

    @property
    def batch_size(self) -> int:
        return int(self.cell["batch_size"])

    @property
    def concurrency(self) -> int:
        return int(self.cell["concurrency"])

    @property
    def prompt_label(self) -> str:
        return str(self.cell["prompt_len"])

    @property
    def prompt_tokens(self) -> float:
        """Mean prompt length in tokens: what the label names when fixed, else what was sent."""
        label = self.prompt_label
        if label.isdigit():
            return float(label)
        done = self.metrics.get("completed") or 0
        return self.metrics.get("total_input_tokens", 0) / done if done else float("nan")

    @property
    def memory(self) -> dict[str, float]:
        return self.info.get("memory", {})

    @property
    def telemetry(self) -> dict[str, Any]:
        return self.info.get("telemetry", {})

    @property
    def traces(self) -> list[dict[str, Any]]:
        return self.info.get("traces", [])

    @property
    def token_count_errors(self) -> list[str]:
        return self.info.get("token_count_errors", [])


def load_cells(paths: Iterable[str | Path]) -> list[CellRecord]:
    """Every batchperf cell of every file, in file order; ValueError naming the file and the fix."""
    return load_runs(paths)[0]


def load_runs(paths: Iterable[str | Path]) -> tuple[list[CellRecord], list[dict[str, Any]]]:
    """The cells (read and validated by :func:`batchperf.results.record.load_results`), and per file its
    name, date, machine and commit info and cell count."""
    cells: list[CellRecord] = []
    runs: list[dict[str, Any]] = []
    for path in map(Path, paths):
        found = [CellRecord(path.stem, result.info) for result in load_results(path)]
        doc = json.loads(path.read_text())  # valid: load_results read it
        cells.extend(found)
        runs.append({"name": path.stem, "datetime": doc.get("datetime"), "machine_info": doc.get("machine_info", {}),
                     "commit_info": doc.get("commit_info", {}), "cells": len(found)})
    return cells, runs
