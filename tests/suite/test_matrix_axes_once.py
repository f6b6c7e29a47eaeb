"""Issue 38's matrix minors: a bad --batchperf-load is a usage error before any cell; one load is one cell id
however it is spelled; a load or a workload given twice is refused (it would be two tests with one cell id)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from batchperf.suite.matrix import TIERS, narrowed

CPU = TIERS["cpu"]


@pytest.mark.parametrize("load", ["0", "-1", "inf", "nan", "x"])
def test_a_bad_load_is_refused_when_the_matrix_is_read(load: str) -> None:
    with pytest.raises(ValueError, match=rf"--batchperf-load: invalid load factor '{load}': must be a finite "):
        narrowed(CPU, load=f"1,{load}")


def test_a_bad_load_is_a_usage_error_before_any_cell(suite: pytest.Pytester) -> None:
    result = suite.runpytest("-m", "cpu", "-p", "no:cacheprovider", "--batchperf-load=0", "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--batchperf-load: invalid load factor '0'*"])


@pytest.mark.parametrize("spelling", ["1.0", "01", "1_0", "10", "1e1", "10.0"])
def test_one_load_is_one_cell_id_however_spelled(spelling: str) -> None:
    def ids(load: str) -> set[str]:
        tier = narrowed(CPU, load=load, backends="continuous", batch_sizes="4", prompt_lens="64", concurrency="4",
                        arrival="rate:2")
        return {c.id for c in tier.cells()}

    plain = ids("1") if float(spelling.replace("_", "")) == 1 else ids("10")
    assert ids(spelling) == plain


def test_a_load_given_twice_is_refused() -> None:
    with pytest.raises(ValueError, match=r"'1' and '1.0' are the same load \(1\); give each load once"):
        narrowed(CPU, load="1,1.0")


def test_a_workload_given_twice_is_refused(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"timestamp": 0, "input_length": 8, "output_length": 2}) + "\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(trace)
    for text in ("synthetic,synthetic", f"trace:{trace},trace:{link}", f"trace:{trace},synthetic,trace:{trace}"):
        with pytest.raises(ValueError, match=r"are the same workload \(.*\); give it once"):
            narrowed(CPU, workloads=text)
    tier = narrowed(CPU, workloads=f"synthetic,trace:{trace},trace:{trace}:speed=2")
    ids = [c.id for c in tier.cells()]
    assert len(ids) == len(set(ids))
