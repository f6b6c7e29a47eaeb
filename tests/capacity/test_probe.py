"""The probes of a capacity search (capacity/probe.py): each one `batchperf run`'s child at its own load, into its
own results file; a probe that wrote nothing is named with its command."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from batchperf.capacity import probe as capacity_probe
from batchperf.capacity.probe import ProbeFailed, Probes


def probes(tmp_path: Path, **options: object) -> Probes:
    return Probes(Path("perf_tests"), "cpu", {"batchperf_backends": "continuous", **options}, ("-k", "cell"),
                  tmp_path)


def test_a_probe_s_load_replaces_the_user_s_and_comes_last(tmp_path: Path) -> None:
    cmd = probes(tmp_path, batchperf_load="3").command(1.5, Path("p.json"))
    assert cmd[:6] == [sys.executable, "-m", "pytest", "perf_tests", "-m", "cpu"]
    assert "--batchperf-backends=continuous" in cmd and "--benchmark-json=p.json" in cmd
    # the reference load follows the probe's: the same cell saturated, in the same process
    assert cmd[-3:] == ["-k", "cell", "--batchperf-load=1.5,64"] and "--batchperf-load=3" not in cmd
    assert probes(tmp_path).command(64, Path("p.json"))[-1] == "--batchperf-load=64"  # its own reference


def test_a_probe_that_wrote_no_results_names_its_load_exit_and_command(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(capacity_probe, "run_child", lambda cmd: 4)
    with pytest.raises(ProbeFailed, match=r"load 2 wrote no results \(pytest exit 4\); run it alone.*--batchperf-load=2"):
        probes(tmp_path).run(2.0)


def test_the_capacity_record_comes_from_the_probe_nearest_the_capacity() -> None:
    from batchperf.capacity.probe import nearest

    files = [(8.0, Path("a")), (2.0, Path("b")), (2.9, Path("c")), (3.2, Path("d")), (2.9, Path("e"))]
    assert nearest(files, 3.0) == (2.9, Path("e"))  # nearest as a ratio; of equals, the latest run
    assert nearest(files, 0.0) == (2.9, Path("e"))  # no capacity: the last probe
