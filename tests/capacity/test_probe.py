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


def test_a_probes_folder_is_read_in_the_order_the_probes_ran_and_timed_from_their_files(tmp_path: Path) -> None:
    """`--from-probes`: probe10 after probe9 (by number, not name); a cut probe (-interrupted) and other files are
    not probes; the search's seconds are its files' first to last written plus one mean gap."""
    import json

    from gate_samples import cell_info, results_file

    from batchperf.capacity.probe import kept_probes, probes_seconds
    from batchperf.results.io import read_results

    names = ["probe09-load2.json", "probe10-load3.5.json", "probe01-load8.json", "probe11-load3-interrupted.json",
             "notes.json"]
    for i, name in enumerate(names):
        path = results_file(tmp_path / name, [cell_info("cpu-tiny-qwen2-continuous-bs4-p64-c8")])
        path.write_text(json.dumps({**json.loads(path.read_text()), "datetime": f"2026-12-08T01:0{i}:00+00:00"}))
    assert kept_probes(tmp_path) == [(8.0, tmp_path / names[2]), (2.0, tmp_path / names[0]),
                                     (3.5, tmp_path / names[1])]
    # written at minutes 2, 0 and 1: a 120 s span over 3 probes, so 180 s with the first probe's own run
    assert probes_seconds([read_results(p) for _, p in kept_probes(tmp_path)]) == pytest.approx(180.0)
