"""Dummy weights: the GPU tier's models built from their shipped configs, on the device, with no hub."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from batchperf.backends.dummy import build_dummy
from batchperf.backends.hf_static import HFStaticBackend
from batchperf.backends.model import ModelLoadError, ModelSpec
from batchperf.measure.kv import kv_bytes_per_token
from batchperf.suite.models import MODELS, config_hash, get_model_spec, load_model, shipped_config_dir
from batchperf.workload.spec import LengthSpec, WorkloadSpec


def small(folder: Path, name: str, **changes: object) -> Path:
    """A copy of shipped config ``name`` with fewer/smaller layers: the same architecture, built in a blink."""
    config = json.loads((shipped_config_dir(name) / "config.json").read_text())
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config | changes))
    return folder


SMALL_QWEN2 = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
               "num_key_value_heads": 2, "max_position_embeddings": 256}  # the real vocabulary: EOS 151645 is in it


def test_every_dummy_model_has_a_shipped_public_config() -> None:
    dummies = [spec for spec in MODELS.values() if spec.weights == "dummy"]
    assert {s.name for s in dummies} == {"qwen2.5-0.5b", "qwen2.5-1.5b", "qwen3-0.6b", "llama-2-7b"}
    for spec in dummies:
        config = json.loads((shipped_config_dir(spec.name) / "config.json").read_text())
        assert config["architectures"] and config["model_type"] in ("qwen2", "qwen3", "llama")
        assert spec.tier == "gpu" and config["torch_dtype"] == spec.dtype  # the dtype the model was published in


def test_a_checkpoint_path_replaces_the_dummy_weights() -> None:
    assert get_model_spec("qwen2.5-0.5b").weights == "dummy"
    assert get_model_spec("qwen2.5-0.5b", {"qwen2.5-0.5b": "/models/q"}) == replace(
        MODELS["qwen2.5-0.5b"], source="/models/q", weights="checkpoint")


def test_a_model_without_a_shipped_config_says_how_to_get_one() -> None:
    with pytest.raises(ModelLoadError, match="no shipped config.*--batchperf-model-path nope=PATH"):
        load_model(ModelSpec("nope", "x/y", tier="gpu", weights="dummy"))
    with pytest.raises(ValueError, match="weights must be one of checkpoint, dummy"):
        ModelSpec("m", "x", tier="gpu", weights="random")


def test_built_on_the_device_in_the_dtype_seeded_without_a_hub(tmp_path: Path, no_hub: list) -> None:
    spec = ModelSpec("small", "Qwen/Qwen2.5-0.5B-Instruct", tier="gpu", dtype="bfloat16", weights="dummy")
    folder = small(tmp_path / "q", "qwen2.5-0.5b", **SMALL_QWEN2)
    torch.manual_seed(123)
    before = torch.rand(1)
    a, b = build_dummy(spec, folder, "cpu"), build_dummy(spec, folder, "cpu")
    torch.manual_seed(123)
    assert torch.equal(torch.rand(1), before), "the build must not disturb the caller's random state"
    assert a.weights == "dummy" and a.tokenizer is None and a.path == folder
    assert {p.dtype for p in a.model.parameters()} == {torch.bfloat16}
    assert {p.device.type for p in a.model.parameters()} == {"cpu"}
    for (name, p), q in zip(a.model.named_parameters(), b.model.parameters()):
        assert torch.equal(p, q), f"{name}: the same seed must give the same weights"
    assert a.pad_token_id == 151645 and config_hash(a.config) == config_hash(b.config)  # no pad id: EOS pads
    assert a.model.generation_config.eos_token_id == 151645  # what hf-static's min_new_tokens suppresses
    assert no_hub == []


def test_the_hub_is_really_blocked_in_these_tests(tmp_path: Path, no_hub: list, monkeypatch) -> None:
    """The control for the test above: a real hub download fails under the same fixture (offline or refused)."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.utils import _http

    monkeypatch.setattr(_http.time, "sleep", lambda s: None)  # its retries back off 1+2+4+8+8 s: don't wait
    with pytest.raises(Exception):  # noqa: B017 - OfflineModeIsEnabled or the refused connection, either will do
        hf_hub_download("Qwen/Qwen2.5-0.5B-Instruct", "config.json", cache_dir=tmp_path)


def test_a_broken_config_fails_with_its_path(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "no-such-architecture"}))
    with pytest.raises(ModelLoadError, match=f"dummy weights could not be built from {tmp_path}"):
        build_dummy(ModelSpec("x", "x", tier="gpu", weights="dummy"), tmp_path)


@pytest.mark.slow
def test_qwen2_5_0_5b_dummy_holds_12288_kv_bytes_per_token_on_the_cpu(no_hub: list) -> None:
    """The real architecture (494M parameters, bf16) built on one CPU thread in seconds; hf-static measures
    the analytic 2 x 24 layers x 2 KV heads x 64 x 2 bytes per token."""
    model = load_model(get_model_spec("qwen2.5-0.5b"), "cpu")
    assert model.weights == "dummy" and sum(p.numel() for p in model.model.parameters()) == 494_032_768
    assert kv_bytes_per_token(model.config, model.dtype) == 12_288
    workload = WorkloadSpec(num_prompts=2, prompt_len=LengthSpec.parse("4"), output_lens=(2,)).build(
        model.vocab_size, model.max_model_len)
    trace = HFStaticBackend(model).run(workload, batch_size=2, concurrency=2)
    assert [r.output_len for r in trace.requests] == [2, 2]
    assert {r.kv_bytes / r.kv_tokens for r in trace.requests} == {12_288}
    assert no_hub == []
