"""Change points over a nightly history: a slow drift no single night flags is found; flat noise is not."""

import argparse
import json
from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from gate_samples import bench as cell_bench
from gate_samples import cell_info

from batchperf.cli.history import main
from batchperf.regress.history import ChangePoint, breakpoints, change_points, load_history, table

TOLERANCE = 0.05  # a per-run gate at ±5% (the gate's own floor is of this order)
DRIFT = "cpu-tiny-qwen2-hf-static-bs8-p512-c16"
FLAT = "cpu-tiny-qwen2-hf-static-bs1-p64-c4"


def bench(cell: str, p99_ms: float, tput: float) -> dict:
    record = cell_info(cell)
    record.metrics = {"p99_e2el_ms": p99_ms, "output_throughput": tput}
    return cell_bench(record)


def write_history(folder: Path, drift: list[float], flat: list[float]) -> None:
    """One results file per night; names are shuffled so the order must come from ``datetime``."""
    folder.mkdir()
    start = datetime(2026, 1, 1, 2, 0)
    for night, (d, f) in enumerate(zip(drift, flat)):
        data = {"machine_info": {}, "commit_info": {"id": f"{night:04x}" * 10}, "version": "5.1.0",
                "datetime": (start + timedelta(days=night)).isoformat(),
                "benchmarks": [bench(DRIFT, d, 500.0), bench(FLAT, f, 500.0)]}
        (folder / f"run-{(night * 7919) % 1000:03d}.json").write_text(json.dumps(data))


@pytest.fixture
def history(tmp_path: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    # 10 steady nights, then P99 grows 1.5% a night for 20 nights (+35% in all); 1% run-to-run noise.
    level = np.r_[np.ones(10), 1.015 ** np.arange(1, 21)]
    drift = 200.0 * level * (1 + 0.01 * rng.standard_normal(30))
    flat = 120.0 * (1 + 0.02 * rng.standard_normal(30))  # 2% noise, no change
    folder = tmp_path / "history"
    write_history(folder, drift.tolist(), flat.tolist())
    return folder, drift, flat


def test_slow_drift_is_found_though_no_night_would_flag_it(history: tuple[Path, np.ndarray, np.ndarray]) -> None:
    folder, drift, _ = history
    night_to_night = drift[1:] / drift[:-1] - 1
    assert np.all(np.abs(night_to_night) < TOLERANCE)  # the per-run gate would pass every night
    runs, notes = load_history(folder)
    assert notes == [] and [r.datetime[:10] for r in runs][:2] == ["2026-01-01", "2026-01-02"]
    points = [p for p in change_points(runs) if p.cell == DRIFT and p.metric == "metrics.p99_e2el_ms"]
    assert points, "the drift was not found"
    assert all(p.worse and p.change > 0 for p in points)  # latency up: worse, every step
    assert 9 <= points[0].run_index <= 16  # the first step is near where the drift began (night 11)
    total = points[-1].after / points[0].before - 1
    assert total > 0.15  # the steps add up to most of the +35%


def test_flat_noisy_history_has_no_change_point(history: tuple[Path, np.ndarray, np.ndarray]) -> None:
    folder, _, _ = history
    runs, _ = load_history(folder)
    assert [p for p in change_points(runs) if p.cell == FLAT] == []
    # throughput is constant in both cells: no change either
    assert [p for p in change_points(runs) if p.metric == "metrics.output_throughput"] == []


def test_step_is_placed_at_its_night_with_its_size() -> None:
    rng = np.random.default_rng(1)
    series = (100 * np.r_[np.ones(12), 0.9 * np.ones(12)] * (1 + 0.01 * rng.standard_normal(24))).tolist()
    assert breakpoints(series) == [12]


@pytest.mark.parametrize("seed", range(20))
def test_flat_noise_rarely_makes_a_change_point(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    assert breakpoints((50 * (1 + 0.03 * rng.standard_normal(30))).tolist()) == []


def test_cli_prints_the_table(history: tuple[Path, np.ndarray, np.ndarray], capsys: pytest.CaptureFixture) -> None:
    folder, _, _ = history
    (folder / "notes.json").write_text("{}")  # not a results file: noted, not fatal
    assert main(argparse.Namespace(folder=folder, penalty=8.0, min_change=0.01, markdown=False)) == 0
    out = capsys.readouterr().out
    assert "note: skipped notes.json: " in out
    assert "batchperf history: 30 runs (2026-01-01 02:00 00000000 … 2026-01-30 02:00 001d001d), 2 cells" in out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("cell "))
    assert lines[header].split() == ["cell", "metric", "from", "run", "before", "after", "change"]
    assert all(DRIFT in line and "p99_e2el_ms" in line and line.endswith("worse") for line in lines[header + 1:])


def test_short_history_says_how_many_runs_it_needs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    folder = tmp_path / "h"
    write_history(folder, [1.0, 2.0], [1.0, 1.0])
    main(argparse.Namespace(folder=folder, penalty=8.0, min_change=0.01, markdown=False))
    out = capsys.readouterr().out
    assert "2 run(s) in" in out and "change points need at least 6 runs" in out


def test_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no such history folder"):
        main(argparse.Namespace(folder=tmp_path / "nope", penalty=8.0, min_change=0.01, markdown=False))


def test_a_pipe_in_a_cell_id_or_a_run_label_stays_in_its_markdown_column() -> None:
    point = ChangePoint("cpu|x", "metrics.output_throughput", 2, SimpleNamespace(label="night|3"), 100.0, 90.0, True)
    *_, row = table([point], markdown=True)  # type: ignore[list-item]
    assert row == "| cpu\\|x | output_throughput | #3 night\\|3 | 100.00 | 90.00 | -10.0% | worse |"
