"""Bad input is a message, never a hang or a traceback (issue 14, items 7 and 10, and the minor items).

Every number of every option is finite and in range; hand-edited results files, foreign fingerprints
and unwritable outputs name the file, the cell or the option, and the way out.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from paths import REPO

from batchperf import cli
from batchperf.suite.matrix import CellParams, parse_arrival
from batchperf.workload.spec import Arrival

SMALL = REPO / "tests" / "data" / "results_cpu_small.json"


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


Cli = Callable[..., Result]


@pytest.fixture
def batchperf(capsys: pytest.CaptureFixture[str]) -> Cli:
    """The ``batchperf`` command in this process (an uncaught exception fails the test with its traceback)."""
    def call(*argv: str) -> Result:
        message = ""
        try:
            code = cli.main(list(argv))
        except SystemExit as exc:  # as the interpreter does: a text is printed to stderr, with status 1
            code, message = (exc.code, "") if isinstance(exc.code, int) or exc.code is None else (1, f"{exc.code}\n")
        out = capsys.readouterr()
        return Result(code or 0, out.out, out.err + message)
    return call


def edited(tmp_path: Path, name: str, edit) -> Path:
    data = json.loads(SMALL.read_text())
    edit(data)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data))
    return path


def first(data: dict) -> dict:
    return data["benchmarks"][0]["extra_info"]


# --- 7. every number of every option is finite and in range ----------------------------------------


@pytest.mark.parametrize("spec", ["rate:1:nan", "rate:1:inf", "rate:nan", "rate:inf", "rate:-2", "rate:1:0",
                                  "rate:1:-1", "rate:1:1:9", "rate:", "rate:1:", "closed:3"])
def test_an_arrival_with_a_bad_number_is_refused(spec: str) -> None:
    with pytest.raises(ValueError, match=f"bad arrival '{spec}'"):
        parse_arrival(spec)
    params = CellParams("cpu", "cpu", "tiny-qwen2", "hf-static", "1", "8", "1", "4", 1, 0, spec)
    with pytest.raises(ValueError, match="bad arrival"):
        params.resolve()  # the cell fails with the message instead of spinning at 100% CPU forever


def test_an_arrival_never_makes_a_send_time_that_is_not_a_number() -> None:
    for burstiness in (math.nan, math.inf, 0.0, -1.0):
        with pytest.raises(ValueError, match="burstiness must be a finite number > 0"):
            Arrival("rate", 1.0, burstiness)
    offsets = Arrival("rate", 50.0, 0.5).offsets(np.random.Generator(np.random.PCG64(0)), 64)
    assert all(math.isfinite(t) for t in offsets)


@pytest.mark.parametrize(("argv", "message"), [
    (["history", "{tmp}", "--penalty", "nan"], "argument --penalty: must be a finite number > 0, got 'nan'"),
    (["history", "{tmp}", "--penalty", "inf"], "argument --penalty: must be a finite number > 0, got 'inf'"),
    (["history", "{tmp}", "--min-change", "nan"], "argument --min-change: must be a finite number >= 0, got 'nan'"),
    (["recommend", str(SMALL), "--p99-e2el-ms", "inf"], "argument --p99-e2el-ms: must be a finite number > 0"),
    (["recommend", str(SMALL), "--p99-ttft-ms", "nan"], "argument --p99-ttft-ms: must be a finite number > 0"),
    (["kv", "--config", "{config}", "--prompt-len", "-5"], "prompt_len and output_len must be >= 0, got -5"),
    (["kv", "--config", "{config}", "--output-len", "nan"], "argument --output-len: invalid int value: 'nan'"),
    (["refresh", str(SMALL), "--repeat", "0"], "--repeat must be >= 1, got 0"),
    (["versus", "--threads", "-1"], "--threads must be >= 0, got -1"),
    (["versus", "--repeats", "-3"], "--repeats must be >= 1, got -3"),
    (["compare", str(SMALL), str(SMALL), "--batchperf-k", "nan"], "gate k must be a finite number >= 0"),
    (["compare", str(SMALL), str(SMALL), "--batchperf-tolerance", "p99_e2el_ms=inf"], "must be in [0, 10)"),
])
def test_cli_numbers_are_finite_and_in_range(batchperf: Cli, tmp_path: Path, argv: list[str], message: str) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64}))
    result = batchperf(*(a.format(tmp=tmp_path, config=config) for a in argv))
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert message in result.stdout + result.stderr


# --- 10. tracebacks instead of messages ------------------------------------------------------------


@pytest.mark.parametrize(("name", "edit", "message"), [
    ("identity-list", lambda d: d["machine_info"].__setitem__("batchperf", {"identity": [1, 2]}),
     "machine_info.batchperf.identity is a list, not an object"),
    ("upgrade-list", lambda d: d["machine_info"].__setitem__("batchperf", {
        "identity": {"arch": "x86_64", "cpu_model": "c", "cpu_cores": 2}, "upgrade": [1, 2]}),
     "machine_info.batchperf.upgrade is a list, not an object"),
    ("cores-text", lambda d: d["machine_info"].__setitem__("batchperf", {
        "identity": {"arch": "x86_64", "cpu_model": "c", "cpu_cores": "two"}}),
     "machine_info.batchperf.identity.cpu_cores is 'two', not a whole number >= 1"),
])
def test_a_foreign_fingerprint_is_a_message(batchperf: Cli, tmp_path: Path, name: str, edit, message: str) -> None:
    path = edited(tmp_path, name, edit)
    for argv in (["compare", str(SMALL), str(path)], ["compare", str(path), str(SMALL)], ["refresh", str(path),
                                                                                          "--dry-run"]):
        result = batchperf(*argv)
        assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
        assert f"{path}: {message}" in result.stderr


@pytest.mark.parametrize(("name", "edit", "message"), [
    ("no-throughput", lambda d: first(d)["metrics"].pop("output_throughput"), "metrics lacks output_throughput"),
    ("no-p99", lambda d: [b["extra_info"]["metrics"].pop("p99_e2el_ms") for b in d["benchmarks"]],
     "metrics lacks p99_e2el_ms"),
    ("batch-size-text", lambda d: first(d)["cell"].__setitem__("batch_size", "x"),
     "cell.batch_size is 'x', not a whole number >= 1"),
    ("concurrency-zero", lambda d: first(d)["cell"].__setitem__("concurrency", 0),
     "cell.concurrency is 0, not a whole number >= 1"),
    ("no-model-name", lambda d: first(d)["cell"].pop("model"), "cell lacks model"),
    ("metrics-list", lambda d: first(d).__setitem__("metrics", [1, 2]), "metrics is a list, not a mapping"),
])
def test_hand_edited_results_are_a_message_in_report_recommend_and_compare(batchperf: Cli, tmp_path: Path, name: str,
                                                                           edit, message: str) -> None:
    path = edited(tmp_path, name, edit)
    cell = "cpu-tiny-qwen2-hf-static-bs1-p64-c4"
    for argv in (["recommend", str(path), "--p99-e2el-ms", "1e9"], ["report", str(path), "--out", str(tmp_path / "r")],
                 ["compare", str(SMALL), str(path)]):
        result = batchperf(*argv)
        assert "Traceback" not in result.stderr, (argv, result.stderr)
        if argv[0] != "recommend" and name.startswith("no-") and "model" not in name:
            # a lost metric: compare flags it (FAILED: missing), the report shows "–" where it would be
            assert result.returncode == 0 and (argv[0] == "report" or "FAILED" in result.stdout)
            continue
        assert result.returncode != 0, (argv, result.stdout)
        assert str(path.stem) in result.stderr and cell in result.stderr and message in result.stderr, result.stderr


@pytest.mark.parametrize("command", ["report", "compare", "recommend", "history"])
def test_the_same_cell_twice_in_one_file_is_refused_not_last_one_kept(batchperf: Cli, tmp_path: Path,
                                                                     command: str) -> None:
    def twice(data: dict) -> None:
        again = copy.deepcopy(data["benchmarks"][0])
        again["fullname"] = again["fullname"].replace("perf_tests/", "elsewhere/")
        again["extra_info"]["metrics"]["output_throughput"] *= 10
        data["benchmarks"].append(again)

    path = edited(tmp_path, "dup", twice)
    argv = {"report": ["report", str(path), "--out", str(tmp_path / "r")],
            "compare": ["compare", str(SMALL), str(path)],
            "recommend": ["recommend", str(path), "--p99-e2el-ms", "1e9"],
            "history": ["history", str(tmp_path)]}
    result = batchperf(*argv[command])
    assert "Traceback" not in result.stderr
    text = result.stdout + result.stderr
    assert "cell cpu-tiny-qwen2-hf-static-bs1-p64-c4 appears twice" in text, text
    if command != "history":  # history skips an unreadable file with a note and goes on
        assert result.returncode != 0


def test_compare_markdown_into_a_missing_folder_is_a_message(batchperf: Cli, tmp_path: Path) -> None:
    result = batchperf("compare", str(SMALL), str(SMALL), "--markdown", str(tmp_path / "no" / "such" / "summary.md"))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "batchperf compare: --markdown" in result.stderr and "No such file or directory" in result.stderr


# --- minor: batchperf kv, --batchperf-model-path ---------------------------------------------------


@pytest.mark.parametrize("key", ["num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                                 "hidden_size"])
def test_kv_refuses_a_config_with_negative_or_zero_sizes(batchperf: Cli, tmp_path: Path, key: str) -> None:
    config = {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
              "hidden_size": 64}
    if key == "hidden_size":
        del config["head_dim"]
    config[key] = -4
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = batchperf("kv", "--config", str(path))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert f"{key} is -4: must be a whole number >= 1" in result.stderr
    assert "-" not in result.stdout  # no negative byte count is printed


def test_a_model_path_for_no_model_of_the_run_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("-p", "no:cacheprovider", "--batchperf-model-path=qwen2.5-0.5b=/models/q",
                                "--batchperf-model-path=typo=/models/x")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--batchperf-model-path typo=/models/x: no model 'typo' in this run*"
                                 "known models: tiny-qwen2*--batchperf-models*"])
    named = pytester.runpytest("-p", "no:cacheprovider", "--collect-only", "--batchperf-models=mine",
                               "--batchperf-model-path=mine=/models/mine")
    assert named.ret != pytest.ExitCode.USAGE_ERROR  # a model named on the command line may be given a path
