"""`batchperf refresh` as the tests call it, and a baseline it pinned (shared by the refresh and store tests)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from gate_samples import CPU_FP, cell_info, results_file

from batchperf.cli import refresh
from batchperf.regress.store import BASELINE_FILE

A, B = "cpu-tiny-qwen2-hf-static-bs4-p64-c8", "cpu-tiny-qwen2-hf-static-bs8-p64-c8"


def run(tmp_path: Path, results: Path | list[Path], *flags: str) -> int:
    parser = argparse.ArgumentParser()
    refresh.add_cli_args(parser)
    files = [str(p) for p in (results if isinstance(results, list) else [results])]
    args = parser.parse_args([*files, "--baselines", str(tmp_path / "baselines"), *flags])
    return refresh.main(args)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return tmp_path / "baselines" / CPU_FP.key


@pytest.fixture
def pinned(tmp_path: Path, folder: Path) -> Path:
    """A baseline of cells A and B, made by the tool."""
    assert run(tmp_path, results_file(tmp_path / "r0.json", [cell_info(A), cell_info(B)])) == 0
    return folder / BASELINE_FILE
