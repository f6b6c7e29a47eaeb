"""The one reader against hostile results files (issue 26, items 11, 12, 13): every problem is the reader's own
ResultsError, naming the file, the cell and the field, and every reader (export, history, ab, compare) refuses
the same file the same way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gate_samples import cell_info, results_file

from batchperf.regress.history import load_history
from batchperf.results.io import read_results
from batchperf.results.record import ResultsError

HUGE = "9" * 400  # an integer no float holds


def edited(tmp_path: Path, edit, name: str = "r.json") -> Path:
    path = results_file(tmp_path / name, [cell_info("c1")])
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("value", [[1, 2], "key", 7, None])
def test_machine_info_batchperf_not_an_object_is_refused_by_the_reader(tmp_path: Path, value) -> None:
    path = edited(tmp_path, lambda d: d["machine_info"].update(batchperf=value))
    if value is None:  # null: no fingerprint recorded, as when the key is absent
        assert read_results(path).fingerprint is None
        return
    with pytest.raises(ResultsError, match=r"machine_info\.batchperf is a \w+, not an object"):
        read_results(path)


@pytest.mark.parametrize(("part", "value"), [("identity", [1]), ("upgrade", ["torch"]), ("soft", "x"),
                                             ("key", {"a": 1})])
def test_a_fingerprint_whose_parts_have_the_wrong_shape_is_refused(tmp_path: Path, part: str, value) -> None:
    path = edited(tmp_path, lambda d: d["machine_info"]["batchperf"].update({part: value}))
    with pytest.raises(ResultsError, match=rf"machine_info\.batchperf\.{part} is a \w+, not a"):
        read_results(path)


def test_export_refuses_a_bad_fingerprint_with_one_line(tmp_path: Path, capsys) -> None:
    from batchperf.cli import main

    path = edited(tmp_path, lambda d: d["machine_info"]["batchperf"].update(upgrade=["torch", "2.1"]))
    with pytest.raises(SystemExit) as exc:
        main(["export", str(path)])
    assert "machine_info.batchperf.upgrade is a list" in str(exc.value.code)


def _huge_metric(text: str) -> str:
    return text.replace('"output_throughput": 100.0', f'"output_throughput": {HUGE}', 1)


def test_a_metric_too_large_for_a_float_names_the_cell_and_the_metric(tmp_path: Path) -> None:
    path = results_file(tmp_path / "r.json", [cell_info("c1")])
    path.write_text(_huge_metric(path.read_text()))
    assert HUGE in path.read_text()
    with pytest.raises(ResultsError, match=r"test_cell\[c1\]: metrics\.output_throughput is a 400-digit integer"):
        read_results(path)


def test_a_huge_integer_elsewhere_in_a_cell_is_refused_not_crashed(tmp_path: Path) -> None:
    path = edited(tmp_path, lambda d: d["benchmarks"][0]["extra_info"]["kv"].update(nested={"deep": [1.0]}))
    path.write_text(path.read_text().replace('"deep": [1.0]', f'"deep": [{HUGE}]'))
    with pytest.raises(ResultsError, match=r"kv\.nested\.deep\[0\] is a 400-digit integer"):
        read_results(path)


def test_an_integer_past_pythons_digit_limit_is_the_readers_error(tmp_path: Path) -> None:
    path = results_file(tmp_path / "r.json", [cell_info("c1")])
    path.write_text(path.read_text().replace('"output_throughput": 100.0', f'"output_throughput": {"9" * 5000}', 1))
    with pytest.raises(ResultsError, match=r"not valid JSON \(a number of 5000 digits, which no measurement has\)") as err:
        read_results(path)
    assert "set_int_max_str_digits" not in str(err.value)  # Python's advice to change a setting: not the fix here


@pytest.mark.parametrize("depth", [900, 100_000])
def test_very_deep_nesting_is_refused(tmp_path: Path, depth: int) -> None:
    path = results_file(tmp_path / "r.json", [cell_info("c1")])
    deep = "[" * depth + "]" * depth
    path.write_text(path.read_text().replace('"traces": [{"requests": []}]', f'"traces": [{deep}]', 1))
    with pytest.raises(ResultsError, match="nested"):
        read_results(path)


def test_history_skips_a_huge_number_and_a_deep_file_with_a_note(tmp_path: Path) -> None:
    results_file(tmp_path / "good.json", [cell_info("c1")])
    results_file(tmp_path / "huge.json", [cell_info("c1")])
    (tmp_path / "huge.json").write_text(_huge_metric((tmp_path / "huge.json").read_text()))
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    runs, notes = load_history(tmp_path)
    assert [r.path.name for r in runs] == ["good.json"]
    assert len(notes) == 2 and all(n.startswith("skipped ") for n in notes)
    assert any("huge.json" in n and "metrics.output_throughput" in n for n in notes)


@pytest.mark.parametrize("section", ["memory", "telemetry"])
@pytest.mark.parametrize("value", [[1, 2], "lots", 5])
def test_a_schema_1_section_that_is_not_an_object_is_a_readers_error(tmp_path: Path, section: str, value) -> None:
    def edit(data: dict) -> None:
        info = data["benchmarks"][0]["extra_info"]
        info["batchperf_schema"] = 1
        info[section] = value

    with pytest.raises(ResultsError, match=rf"test_cell\[c1\]: {section} is a \w+, not a mapping"):
        read_results(edited(tmp_path, edit))
