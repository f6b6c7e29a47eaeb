"""`batchperf versus`: backends side by side on the matrix's cells, interleaved, in one process."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from batchperf import backends
from batchperf.backends import BackendUnavailable
from batchperf.cli import main
from batchperf.suite import versus
from batchperf.suite.matrix import TIERS, narrowed

SMALL = ["--batchperf-batch-sizes", "2", "--batchperf-prompt-lens", "8", "--batchperf-concurrency", "4",
         "--batchperf-num-prompts", "4", "--batchperf-output-lens", "2,3"]
NUMBER = r"\d+\.\d"


def test_two_backends_on_one_cell_interleaved(tiny_model: object, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []
    real_one_round = versus.one_round

    def recorded(backend, *args):
        order.append(backend.name)
        return real_one_round(backend, *args)

    monkeypatch.setattr(versus, "one_round", recorded)
    out = tmp_path / "versus.json"
    code = main(["versus", "--batchperf-backends", "hf-static,continuous", *SMALL, "--repeats", "2", "--threads", "1",
                 "--json", str(out)])
    stdout = capsys.readouterr().out
    assert code == 0, stdout
    assert order == ["hf-static", "continuous", "continuous", "hf-static"]  # A B, then B A
    lines = stdout.splitlines()
    assert lines[0] == ("# cpu tier, 4 prompts/run, output lengths 2,3, best of 2 interleaved runs per backend, "
                        "torch threads 1")
    assert lines[1] == ("| model | prompt | batch | conc | hf-static tok/s | continuous tok/s | continuous/hf-static "
                        "| target | met |")
    row = re.fullmatch(rf"\| tiny-qwen2 \| 8 \| 2 \| 4 \| ({NUMBER}) \| ({NUMBER}) \| (\d+\.\d\d) \| 1\.25 \| (yes|NO) \|",
                       lines[3])
    assert row is not None, lines[3]
    data = json.loads(out.read_text())
    assert data["backends"] == ["hf-static", "continuous"] and data["unavailable"] == {} and data["repeats"] == 2
    (cell,) = data["cells"]
    assert cell["cell"]["batch_size"] == "2" and cell["cell"]["concurrency"] == "4" and "backend" not in cell["cell"]
    static, cont = cell["throughput"]["hf-static"], cell["throughput"]["continuous"]
    assert len(static) == len(cont) == 2 and cell["errors"] == [] and cell["targets"] == {"continuous": 1.25}
    assert cell["ratios"]["continuous"] == pytest.approx([c / s for s, c in zip(static, cont)])
    assert all(len(cell["p99_ttft_ms"][b]) == 2 and min(cell["p99_ttft_ms"][b]) > 0 for b in ("hf-static", "continuous"))
    # the table shows the best run of each and the ratio of the bests
    assert row.groups()[:3] == (f"{max(static):.1f}", f"{max(cont):.1f}", f"{max(cont) / max(static):.2f}")
    assert row.group(4) == ("yes" if max(cont) / max(static) >= 1.25 else "NO")


class Unavailable:
    def __init__(self, model: object) -> None:
        raise BackendUnavailable("needs a warp core; install one")


def test_unavailable_backend_is_listed_and_a_bad_cell_does_not_stop_the_table(
        tiny_model: object, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(backends._REGISTRY, "warp", Unavailable)  # this test's only; the registry is global
    code = main(["versus", "--batchperf-backends", "hf-static,continuous,warp", *SMALL,
                 "--batchperf-batch-sizes", "zero,2", "--repeats", "1"])
    captured = capsys.readouterr()
    assert code == 1  # the bad cell is an error
    assert "warp: not available: needs a warp core; install one" in captured.err
    lines = captured.out.splitlines()
    assert lines[3] == "| tiny-qwen2 | 8 | zero | 4 | - | - | - | - | ERROR |"
    assert re.fullmatch(rf"\| tiny-qwen2 \| 8 \| 2 \| 4 \| {NUMBER} \| {NUMBER} \| \d+\.\d\d \| 1\.25 \| (yes|NO) \|",
                        lines[4]), lines[4]
    assert "warp not available: needs a warp core; install one" in captured.out
    assert "error in cpu-tiny-qwen2-hf-static-bszero-p8-c4: ValueError: invalid batch size 'zero'" in captured.out


@pytest.mark.parametrize(("args", "message"), [
    (["--batchperf-backends", "hf-static"], "needs two or more different backends (the first is the reference), "
                                            "got hf-static"),
    (["--batchperf-backends", "hf-static,hf-static"], "needs two or more different backends"),
    (["--batchperf-backends", "hf-static,warp-drive"], "unknown backend(s) warp-drive; known: "),
    (["--batchperf-backends", "hf-static,continuous", "--repeats", "0"], "--repeats must be >= 1, got 0"),
    (["--batchperf-num-prompts", "0"], "invalid num_prompts '0': must be a whole number >= 1"),
])
def test_bad_input_is_refused_with_the_fix(args: list[str], message: str) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["versus", *args])
    assert str(exc.value).startswith("batchperf versus: ") and message in str(exc.value)


def test_the_cells_are_those_every_backend_has_in_the_tier() -> None:
    cpu = TIERS["cpu"]
    both = versus.shared_cells(cpu, ["hf-static", "continuous"])
    assert [c.id for c in both] == [c.id for c in cpu.cells() if c.backend == "hf-static"] and len(both) == 27 + 3
    # (27 synthetic cells and the three traffic kinds both run in the whole tier: prefix, tenants, trace)
    # vllm's sub-matrix on the CPU tier is bs4 p64 c4,c16: the cells hf-static shares with it
    peer = versus.shared_cells(cpu, ["vllm", "hf-static"])
    # and the shared-prefix cell (vLLM runs the two tenants only under its priority policy: another cell)
    assert [c.id for c in peer] == ["cpu-tiny-qwen2-vllm-bs4-p64-c4", "cpu-tiny-qwen2-vllm-bs4-p64-c16",
                                    "cpu-tiny-qwen2-vllm-bs4-p32-c4-wprefix2x128"]
    # an axis given on the command line replaces the sub-matrix's limit too
    narrow = narrowed(cpu, batch_sizes="1", concurrency="4", prompt_lens="64")
    assert [c.id for c in versus.shared_cells(narrow, ["vllm", "hf-static"])] == ["cpu-tiny-qwen2-vllm-bs1-p64-c4"]
    disjoint = replace(cpu, limits={"vllm": {"batch_sizes": ("4",)}, "hf-static": {"batch_sizes": ("8",)}}, traffic=())
    assert versus.shared_cells(disjoint, ["vllm", "hf-static"]) == []


def test_best_and_median_and_a_pair_without_a_target() -> None:
    params = TIERS["cpu"].cells()[0]
    result = versus.VersusResult(params, ["a", "b"], throughput={"a": [100.0, 50.0, 90.0], "b": [120.0, 80.0, 60.0]},
                                 ratios={"b": [1.2, 1.6, 0.6667]})
    assert result.value("a", "best") == 100.0 and result.ratio("b", "best") == pytest.approx(1.2)
    assert result.value("b", "median") == 80.0 and result.ratio("b", "median") == pytest.approx(1.2)
    assert result.target("b") is None
    assert versus.format_table([result], ["a", "b"], "median").splitlines() == [
        "| model | prompt | batch | conc | a tok/s | b tok/s | b/a |",
        "|---|---|--:|--:|--:|--:|--:|",
        "| tiny-qwen2 | 64 | 1 | 4 | 90.0 | 80.0 | 1.20 |",
    ]
    assert versus.target("hf-static", "continuous", 8, 16) == 1.25 and versus.target("hf-static", "continuous", 8, 8) == 0.97
