"""`batchperf compare A.json B.json`: terminal table, Markdown, exit codes."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
from gate_samples import CPU_TPUT_TOL, GPU_FP, cell_info, results_file, scaled

from batchperf.cli import compare as compare_cli

A, B = "cpu-tiny-qwen2-hf-static-bs4-p64-c8", "cpu-tiny-qwen2-hf-static-bs8-p64-c8"


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    compare_cli.add_cli_args(parser)
    return compare_cli.main(parser.parse_args(list(argv)))


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    a = results_file(tmp_path / "a.json", [cell_info(A), cell_info(B)])
    b = results_file(tmp_path / "b.json", [scaled(cell_info(A), 3.0), scaled(cell_info(B), 0.5)])
    return a, b


def test_terminal_table_and_markdown(files: tuple[Path, Path], tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    a, b = files
    md = tmp_path / "summary.md"
    assert run(str(a), str(b), "--markdown", str(md)) == 0
    out = capsys.readouterr().out
    assert f"{A}: REGRESSION" in out and f"{B}: improvement" in out and "refresh suggested" in out
    assert "1 regression, 1 improvement" in out
    text = md.read_text()
    assert "| metric | baseline | measured | change | tolerance | verdict |" in text
    assert f"| **output_throughput** | **100** | **33.33** | **-66.7%** | **{CPU_TPUT_TOL}** | **REGRESSION** |" in text
    assert text.index(f"### ❌ `{A}`") < text.index(f"### ⬆️ `{B}`")  # regressions first


def test_fail_on_regression_and_all_metrics(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    a, b = files
    assert run(str(a), str(b), "--fail-on-regression", "--all-metrics") == 1
    assert "mean_ttft_ms" in capsys.readouterr().out  # ungated metrics listed too
    assert run(str(a), str(a), "--fail-on-regression") == 0


def test_tolerance_override_and_cells_missing_from_b(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = results_file(tmp_path / "a.json", [cell_info(A), cell_info(B)])
    b = results_file(tmp_path / "b.json", [scaled(cell_info(A), 1.2)])
    assert run(str(a), str(b), "--markdown", "--batchperf-tolerance", "p99_ttft_ms=0.3",
               "--batchperf-tolerance", "p99_e2el_ms=0.3") == 0
    out = capsys.readouterr().out
    assert f"{B}: FAILED" in out and "missing: in a.json, not in b.json" in out
    assert "p99_e2el_ms" in out and "+30.0%" in out


def test_other_hardware_is_not_compared(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = results_file(tmp_path / "a.json", [cell_info(A)], fp=GPU_FP)
    b = results_file(tmp_path / "b.json", [scaled(cell_info(A), 3)])
    assert run(str(a), str(b), "--fail-on-regression") == 0
    out = capsys.readouterr().out
    assert f"{A}: NO BASELINE" in out and "hardware.gpus.0.name: NVIDIA H200 → (absent)" in out


@pytest.mark.parametrize(("name", "text", "message"), [("bad.json", "not json", r"bad.json: not valid JSON"),
                                                       ("nope.json", None, "no such results file")])
def test_bad_files_exit_2_with_the_problem_never_1_which_means_regression(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, text: str | None, message: str) -> None:
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    with pytest.raises(SystemExit) as exc:
        run(str(path), str(path), "--fail-on-regression")
    assert exc.value.code == 2  # 1 is --fail-on-regression's "a cell regressed" (docs/baselines.md)
    err = capsys.readouterr().err
    assert err.startswith("batchperf compare: ") and re.search(message, err)


def test_a_markdown_folder_that_is_missing_exits_2(tmp_path: Path, files: tuple[Path, Path],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        run(str(files[0]), str(files[1]), "--fail-on-regression", "--markdown", str(tmp_path / "no" / "s.md"))
    assert exc.value.code == 2 and "create the folder first" in capsys.readouterr().err
