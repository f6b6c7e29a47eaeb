"""KV accounting against published model configs, copied from the hub: the GPU tier's, shipped in the package
(src/batchperf/suite/configs/<name>/config.json), and a few larger ones (tests/data/configs)."""

import json
from argparse import Namespace
from pathlib import Path

import pytest
from paths import DATA

from batchperf.cli import kv as kv_cli
from batchperf.measure import kv
from batchperf.suite.models import shipped_config_dir

CONFIGS = DATA / "configs"
# registry name of the shipped config of each published checkpoint
SHIPPED = {"qwen2.5-0.5b-instruct": "qwen2.5-0.5b", "qwen2.5-1.5b-instruct": "qwen2.5-1.5b",
           "llama-2-7b-hf": "llama-2-7b", "qwen3-0.6b": "qwen3-0.6b"}


def load(name: str) -> dict:
    path = shipped_config_dir(SHIPPED[name]) / "config.json" if name in SHIPPED else CONFIGS / f"{name}.json"
    return json.loads(path.read_text())


@pytest.mark.parametrize(
    ("name", "dtype", "expected"),
    [
        # 2 × layers × kv_heads × head_dim × dtype bytes, worked by hand
        ("qwen2.5-0.5b-instruct", "bfloat16", 2 * 24 * 2 * 64 * 2),  # GQA: 2 KV heads of 14
        ("qwen2.5-1.5b-instruct", "bfloat16", 2 * 28 * 2 * 128 * 2),
        ("qwen2.5-7b-instruct", "bfloat16", 2 * 28 * 4 * 128 * 2),
        ("llama-2-7b-hf", "float16", 2 * 32 * 32 * 128 * 2),  # MHA: 512 KiB per token
        ("llama-2-13b-hf", "float16", 2 * 40 * 40 * 128 * 2),
        ("llama-2-70b-hf", "float16", 2 * 80 * 8 * 128 * 2),  # GQA: 8 KV heads of 64
        ("qwen3-0.6b", "bfloat16", 2 * 28 * 8 * 128 * 2),  # explicit head_dim 128 != 1024/16
        ("llama-2-7b-hf", "float32", 2 * 32 * 32 * 128 * 4),
        ("qwen2.5-0.5b-instruct", "fp8", 2 * 24 * 2 * 64 * 1),
    ],
)
def test_bytes_per_token_of_published_configs(name: str, dtype: str, expected: int) -> None:
    assert kv.kv_bytes_per_token(load(name), dtype) == expected


def test_llama_2_7b_is_half_a_mebibyte_per_token() -> None:
    assert kv.kv_bytes_per_token(load("llama-2-7b-hf"), "float16") == 512 * 1024


def test_the_studys_formula_overstates_gqa_models() -> None:
    """The study's 2 × hidden × 2 × dtype per token per layer-less model is not what a GQA model holds."""
    cfg = load("llama-2-70b-hf")
    study_per_token = 2 * cfg["hidden_size"] * 2 * 2  # ignores layers and KV heads
    assert kv.kv_bytes_per_token(cfg, "float16") != study_per_token


def test_bytes_per_request_is_per_token_times_tokens() -> None:
    cfg = load("qwen2.5-1.5b-instruct")
    assert kv.kv_bytes_per_request(cfg, "bfloat16", 512, 32) == 28672 * 544


def test_tokens_held_excludes_the_last_sampled_token() -> None:
    assert kv.kv_tokens_held(64, 32) == 95
    assert kv.kv_tokens_held(64, 0) == 64


def test_works_on_a_transformers_config_object() -> None:
    from transformers import AutoConfig

    config = AutoConfig.for_model(**load("qwen3-0.6b"))
    assert kv.kv_bytes_per_token(config, "bfloat16") == 2 * 28 * 8 * 128 * 2


def test_torch_dtype_is_accepted() -> None:
    import torch

    assert kv.dtype_bytes(torch.bfloat16) == 2
    assert kv.dtype_bytes("torch.float32") == 4


@pytest.mark.parametrize("bad", ["float13", "int4x"])
def test_unknown_dtype_is_named(bad: str) -> None:
    with pytest.raises(ValueError, match=bad):
        kv.dtype_bytes(bad)


def test_non_llm_config_is_rejected() -> None:
    with pytest.raises(ValueError, match="num_hidden_layers"):
        kv.kv_bytes_per_token({"hidden_size": 8}, "float16")


def test_negative_lengths_are_rejected() -> None:
    with pytest.raises(ValueError, match="prompt_len"):
        kv.kv_bytes_per_request(load("llama-2-7b-hf"), "float16", -1, 3)


def test_cli_prints_both_figures(capsys: pytest.CaptureFixture[str]) -> None:
    args = Namespace(config=shipped_config_dir("qwen2.5-0.5b"), dtype="float16", prompt_len=512, output_len=32,
                     json=True)
    assert kv_cli.main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["bytes_per_token"] == 12288
    assert out["bytes_per_request"] == 12288 * 544


def test_cli_names_a_missing_or_corrupt_file(tmp_path: Path) -> None:
    args = Namespace(config=tmp_path / "nope.json", dtype="float16", prompt_len=1, output_len=1, json=False)
    with pytest.raises(SystemExit, match="no such file"):
        kv_cli.main(args)
    (tmp_path / "bad.json").write_text("{not json")
    args.config = tmp_path / "bad.json"
    with pytest.raises(SystemExit, match="not valid JSON"):
        kv_cli.main(args)


def test_config_hash_ignores_where_the_model_was_read_from(tiny_model) -> None:
    from batchperf.suite.models import config_hash

    data = tiny_model.config.to_dict()
    a, b = data | {"_name_or_path": "/a", "transformers_version": "9"}, data | {"_name_or_path": "/b"}
    assert config_hash(a) == config_hash(b) == config_hash(tiny_model.config)
    assert config_hash(data | {"num_hidden_layers": 3}) != config_hash(a)
