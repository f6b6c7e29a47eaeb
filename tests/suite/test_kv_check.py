"""The KV-cache growth check: one item at the end of the session over the cells that ran, whatever selects them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from batchperf import backends
from batchperf.backends.hf_static import HFStaticBackend
from batchperf.measure.trace import RunTrace
from batchperf.suite.shard import shard_of
from batchperf.workload.spec import Workload

ARGS = ["-m", "cpu", "-v", "-rs", "-p", "no:cacheprovider", "--benchmark-disable", "--batchperf-backends=hf-static",
        "--batchperf-batch-sizes=2", "--batchperf-concurrency=2", "--batchperf-num-prompts=3",
        "--batchperf-rounds=1", "--batchperf-output-lens=2,3"]
FIT = "KV-cache growth of tiny-qwen2 on {backend}: slope {slope} B/token over {n} token counts*"


def cell_id(prompt_len: int, backend: str = "hf-static") -> str:
    return f"cpu-tiny-qwen2-{backend}-bs2-p{prompt_len}-c2"


def test_runs_last_over_the_cells_that_k_selected(suite: pytest.Pytester) -> None:
    result = suite.runpytest(*ARGS, "--batchperf-prompt-lens=8,16,24", "-k", "p8 or p24")
    result.assert_outcomes(passed=3)  # p16 and the gpu tier deselected
    result.stdout.fnmatch_lines([f"test_cells.py::test_cell[[]{cell_id(8)}[]] PASSED*",
                                 f"test_cells.py::test_cell[[]{cell_id(24)}[]] PASSED*",
                                 "batchperf::kv_cache_growth PASSED*",
                                 "*= batchperf KV-cache growth =*",
                                 FIT.format(backend="hf-static", slope="2,048.0", n=2) + "(?0.00%)"])


def test_runs_over_the_cells_of_its_shard(suite: pytest.Pytester) -> None:
    prompts = (8, 12, 16, 20, 24)
    held = [p for p in prompts if shard_of(cell_id(p), 2) == 1]
    assert 2 <= len(held) < len(prompts)  # the premise: shard 1 holds some cells, at two or more prompt lengths
    result = suite.runpytest(*ARGS, f"--batchperf-prompt-lens={','.join(map(str, prompts))}", "--batchperf-shard=1/2")
    result.assert_outcomes(passed=len(held) + 1)
    result.stdout.fnmatch_lines(["batchperf::kv_cache_growth PASSED*",
                                 FIT.format(backend="hf-static", slope="2,048.0", n=len(held)) + "(?0.00%)"])


def test_runs_after_cells_whose_file_sorts_after_the_old_check(suite: pytest.Pytester) -> None:
    # The check used to be perf_tests/measure/test_kv_growth.py and saw only the cells of files sorting before it.
    (suite.path / "test_cells.py").rename(suite.path / "test_zz_cells.py")
    assert "test_zz_cells.py" > "test_kv_growth.py"
    result = suite.runpytest(*ARGS, "--batchperf-prompt-lens=8,24")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines([f"test_zz_cells.py::test_cell[[]{cell_id(24)}[]] PASSED*",
                                 "batchperf::kv_cache_growth PASSED*"])


class LeakyBackend:
    """hf-static whose reported KV bytes are doubled: what a cache keeping a stale copy of every token shows."""

    name = "leaky"

    def __init__(self, model: object) -> None:
        self.inner = HFStaticBackend(model)  # type: ignore[arg-type]

    def run(self, workload: Workload, batch_size: int, concurrency: int) -> RunTrace:
        trace = self.inner.run(workload, batch_size, concurrency)
        trace.requests = [replace(r, kv_bytes=2 * r.kv_bytes) if r.kv_bytes else r for r in trace.requests]
        return trace

    def close(self) -> None:
        self.inner.close()


def test_fails_naming_the_fit_when_a_backend_misreports_its_kv(suite: pytest.Pytester,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # registered for this test only (the inner pytest runs in this process, on this registry)
    monkeypatch.setitem(backends._REGISTRY, "leaky", LeakyBackend)
    result = suite.runpytest(*ARGS, "--batchperf-prompt-lens=8,24", "--batchperf-backends=hf-static,leaky")
    result.assert_outcomes(passed=4, failed=1)  # the cells pass: only the fit over them shows the leak
    result.stdout.fnmatch_lines(["batchperf::kv_cache_growth FAILED*",
                                 "*KV-cache growth differs from the analytic bytes/token by more than 2%:",
                                 FIT.format(backend="leaky", slope="4,096.0", n=2) + "(+100.00%)"])


def test_skips_with_the_reason_when_nothing_can_be_fitted(suite: pytest.Pytester) -> None:
    result = suite.runpytest(*ARGS, "--batchperf-prompt-lens=8")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED * KV-cache growth of tiny-qwen2 on hf-static: one token count only (*); "
                                 "run two or more prompt lengths to fit a slope"])


def test_is_not_added_when_no_cell_is_selected(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_other="def test_other():\n    pass\n")
    result = suite.runpytest(*ARGS[2:], "--batchperf-prompt-lens=8", "-k", "other")  # no -m: test_other has no tier
    result.assert_outcomes(passed=1)
    assert "kv_cache_growth" not in result.stdout.str()
