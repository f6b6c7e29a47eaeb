"""The plugin end to end, by running pytest inside pytest on the tiny CPU model."""

import json
from pathlib import Path

import pytest

SMALL = ["-m", "cpu", "--batchperf-batch-sizes=2", "--batchperf-prompt-lens=8", "--batchperf-concurrency=2",
         "--batchperf-num-prompts=3", "--batchperf-rounds=1", "--batchperf-output-lens=2,3", "-p", "no:cacheprovider",
         "--batchperf-backends=hf-static"]
FAST = [*SMALL, "--benchmark-disable"]  # one run per cell, for tests of what happens around the cells


def test_cells_run_and_store_everything(suite: pytest.Pytester) -> None:
    out = suite.path / "out.json"
    result = suite.runpytest(*SMALL, "--batchperf-concurrency=1,2", f"--benchmark-json={out}")
    # and the KV-growth check: c1 runs each request alone, c2 pads a pair to the longer target, so the
    # two cells hold different token counts and give a slope
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*= batchperf =*", "cell *out tok/s*P99 E2EL ms*preempt SLO att",
                                 "cpu-tiny-qwen2-hf-static-bs2-p8-c1 * - *100%",
                                 "cpu-tiny-qwen2-hf-static-bs2-p8-c2 * - *100%",
                                 "models loaded: 1 (tiny-qwen2)"])
    result.stdout.fnmatch_lines(["KV-cache growth of tiny-qwen2 on hf-static: slope 2,048.0 B/token *"])
    benches = json.loads(out.read_text())["benchmarks"]
    info = benches[0]["extra_info"]
    assert info["cell"]["batch_size"] == 2 and info["cell"]["prompt_len"] == "8"
    for name in ("output_throughput", "p99_ttft_ms", "p99_itl_ms", "p99_tpot_ms", "p99_e2el_ms", "n_itl"):
        assert name in info["metrics"]
    assert len(info["rounds"]) == 1
    # no tenants, no SLOs: every request completed in full is met; one tenant block, "", repeats the cell's numbers
    assert info["slo"]["attainment"] == 1.0 and info["slo"]["offered"] == info["metrics"]["completed"]
    assert list(info["tenants"]) == [""] and info["tenants"][""]["p99_ttft_ms"] == info["metrics"]["p99_ttft_ms"]
    assert info["kv"]["bytes_per_token_measured"] == info["kv"]["bytes_per_token_analytic"] == 2048
    trace = info["traces"][0]
    assert len(trace["requests"]) == 3 and all(len(r["token_times"]) == r["target_len"] for r in trace["requests"])
    # engine counters of c2: batches [targets 2, 3] then [2]: 3 + 2 forward passes over 2 × (8 + 2) + 1 × (8 + 1)
    # token slots, of which the first request's third decode slot was discarded
    counters = benches[1]["extra_info"]["counters"]
    assert benches[1]["extra_info"]["cell"]["concurrency"] == 2
    assert counters["engine_steps"] == 5 and counters["padding_waste"] == pytest.approx(1 / 29)
    assert "no scheduler" in counters["absent"]["num_preemptions"] and "num_preemptions" not in counters


def test_gpu_cells_skip_with_a_reason_without_cuda(suite: pytest.Pytester) -> None:
    result = suite.runpytest("-m", "gpu", "--batchperf-backends=hf-static", "--batchperf-batch-sizes=1", "--batchperf-prompt-lens=128",
                             "--batchperf-concurrency=16", "-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=3)  # the two cells, then the KV-growth check with no cell to fit
    result.stdout.fnmatch_lines(["*SKIPPED*CUDA is not available*", "*SKIPPED*no performance cell ran*"])


def test_invalid_matrix_entry_fails_its_cell_and_the_rest_run(suite: pytest.Pytester) -> None:
    result = suite.runpytest(*FAST, "--batchperf-batch-sizes=2,zero")
    result.assert_outcomes(passed=1, errors=1, skipped=1)
    result.stdout.fnmatch_lines(["*invalid matrix entry in cell cpu-tiny-qwen2-hf-static-bszero-p8-c2: "
                                 "invalid batch size 'zero': must be a whole number >= 1*"])


def test_unknown_model_fails_its_cells_and_the_rest_run(suite: pytest.Pytester) -> None:
    result = suite.runpytest(*FAST, "--batchperf-models=tiny-qwen2,no-such-model")
    result.assert_outcomes(passed=1, errors=1, skipped=1)
    result.stdout.fnmatch_lines(["*unknown model 'no-such-model'; known models: tiny-qwen2*"])


def test_model_that_does_not_load_fails_its_cells_and_the_rest_run(suite: pytest.Pytester, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{ this is not json")
    result = suite.runpytest(*FAST, "--batchperf-models=broken,tiny-qwen2", f"--batchperf-model-path=broken={broken}")
    result.assert_outcomes(passed=1, errors=1, skipped=1)
    result.stdout.fnmatch_lines([f"*model 'broken' did not load from {broken}*"])


def test_unknown_backend_fails_its_cells(suite: pytest.Pytester) -> None:
    result = suite.runpytest(*FAST, "--batchperf-backends=hf-static,warp-drive")
    result.assert_outcomes(passed=1, errors=1, skipped=1)
    result.stdout.fnmatch_lines(["*unknown backend 'warp-drive'*"])


def test_bad_global_option_is_a_usage_error(suite: pytest.Pytester) -> None:
    result = suite.runpytest(*FAST, "--batchperf-num-prompts=0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*batchperf: invalid num_prompts '0'*"])
    result = suite.runpytest(*FAST, "--batchperf-model-path=oops")
    result.stderr.fnmatch_lines(["*expected NAME=PATH*"])


def test_any_tier_runs_on_the_cpu_and_dummy_weights_are_said_once(suite: pytest.Pytester, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU-tier model on dummy weights (a small Qwen2 config standing in for a shipped one), run on the CPU."""
    from batchperf.backends.model import ModelSpec
    from batchperf.suite import models

    (tmp_path / "fake-gpu-qwen2").mkdir()
    (tmp_path / "fake-gpu-qwen2" / "config.json").write_text(json.dumps({
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
        "max_position_embeddings": 128, "eos_token_id": 1, "bos_token_id": 1, "tie_word_embeddings": True}))
    monkeypatch.setattr(models, "CONFIGS", tmp_path)
    monkeypatch.setitem(models.MODELS, "fake-gpu-qwen2", ModelSpec("fake-gpu-qwen2", "x/small", "gpu", "float32",
                                                                 weights="dummy"))
    out = tmp_path / "out.json"
    result = suite.runpytest("-m", "gpu", "--batchperf-device", "cpu", "--batchperf-models=fake-gpu-qwen2",
                             "--batchperf-backends=hf-static,continuous", *SMALL[2:-1], f"--benchmark-json={out}")
    result.assert_outcomes(passed=2, skipped=1)  # two cells; one prompt length: no KV slope to fit
    assert result.stdout.str().count("weights: DUMMY for fake-gpu-qwen2 (seeded random weights") == 1
    records = [b["extra_info"] for b in json.loads(out.read_text())["benchmarks"]]
    assert [r["cell"]["id"] for r in records] == ["gpu-fake-gpu-qwen2-hf-static-bs2-p8-c2",
                                                  "gpu-fake-gpu-qwen2-continuous-bs2-p8-c2"]
    for r in records:
        assert r["cell"]["device"] == "cpu" and r["model"]["weights"] == "dummy"
        assert r["model"]["path"] == str(tmp_path / "fake-gpu-qwen2")
        assert r["efficiency"]["device"] == "cpu" and r["efficiency"]["decode_steps"] > 0


def test_a_bad_device_is_a_usage_error(suite: pytest.Pytester) -> None:
    result = suite.runpytest(*FAST, "--batchperf-device=tpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*batchperf: invalid device 'tpu': use cpu or cuda*"])


def test_the_summary_marks_a_client_bound_cell_and_says_why() -> None:
    from gate_samples import CLIENT_LAG_REASON, cell_info, client_bound

    from batchperf.suite.plugin import client_bound_lines, summary_rows

    marked, plain = client_bound(cell_info(), saturated=False), cell_info("cpu-tiny-qwen2-hf-static-bs8-p64-c8")
    rows = summary_rows([marked, plain])
    assert rows[1].startswith(f"{marked.id} [client-bound] ") and "[client-bound]" not in rows[2]
    assert client_bound_lines([marked, plain]) == [
        f"client-bound {marked.id}: its latencies describe the client, not the server (not judged by the gate; nor "
        f"its throughput: the server was underfed): round 1 of 3: {CLIENT_LAG_REASON}"]
