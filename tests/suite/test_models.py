"""The builtin models (suite/models.py): one builder, a recipe per model; the opt-in small model is selectable."""

from __future__ import annotations

import json

import pytest

from batchperf.backends.model import ModelLoadError
from batchperf.suite import models
from batchperf.suite.matrix import TIERS, narrowed
from batchperf.suite.models import BUILT, MODELS, BuiltRecipe, built_model_dir, get_model_spec, resolve_source


def test_every_builtin_source_has_a_recipe_and_the_tiny_ones_is_unchanged() -> None:
    builtin = {s.name for s in MODELS.values() if s.source.startswith("builtin:")}
    assert builtin == set(BUILT) == {"tiny-qwen2", "small-qwen2"}
    tiny = BUILT["tiny-qwen2"]  # its cache folder and weights must stay those already built
    assert (tiny.vocab, tiny.seed, tiny.version, tiny.config["hidden_size"]) == (1024, 1234, 1, 256)


def test_small_qwen2_is_an_opt_in_cpu_model_wider_than_the_tiny_one() -> None:
    spec = get_model_spec("small-qwen2")
    assert (spec.tier, spec.dtype, spec.opt_in, spec.weights) == ("cpu", "float32", True, "checkpoint")
    small, tiny = BUILT["small-qwen2"], BUILT["tiny-qwen2"]
    assert small.config["hidden_size"] > tiny.config["hidden_size"] and small.vocab > tiny.vocab
    assert small.config["hidden_size"] % small.config["num_attention_heads"] == 0
    assert small.config["num_attention_heads"] % small.config["num_key_value_heads"] == 0


def test_no_tier_runs_an_opt_in_model_unless_it_is_named() -> None:
    opt_in = {name for name, spec in MODELS.items() if spec.opt_in}
    assert all(not opt_in & set(tier.models) for tier in TIERS.values())
    cells = narrowed(TIERS["cpu"], models="small-qwen2", backends="continuous", batch_sizes="16").cells()
    assert cells and {c.model for c in cells} == {"small-qwen2"}
    assert all(c.id.startswith("cpu-small-qwen2-continuous-bs16") for c in cells)


def test_a_recipe_is_built_into_a_folder_named_by_model_and_version(tmp_path, monkeypatch) -> None:
    recipe = BuiltRecipe({**models.TINY_CONFIG, "hidden_size": 64, "intermediate_size": 128,
                          "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2}, 300, 7, 3)
    monkeypatch.setitem(BUILT, "mini-test", recipe)
    folder = built_model_dir("mini-test", tmp_path)
    assert folder == tmp_path / "models" / "mini-test-v3"
    config = json.loads((folder / "config.json").read_text())
    assert (config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]) == (64, 1, 300)
    assert len(json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"]) == 300
    assert [p.name for p in (tmp_path / "models").iterdir()] == ["mini-test-v3"]  # no staging folder left


def test_a_built_folder_is_reused_and_resolve_source_finds_it(tmp_path, monkeypatch) -> None:
    folder = tmp_path / "models" / "small-qwen2-v1"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")  # already built: nothing is rebuilt
    monkeypatch.setenv("BATCHPERF_CACHE", str(tmp_path))
    monkeypatch.setattr(models, "_build", lambda *a: pytest.fail("built again"))
    assert resolve_source(get_model_spec("small-qwen2")) == folder
    assert built_model_dir("small-qwen2") == folder


def test_an_unknown_builtin_names_the_known_ones(tmp_path) -> None:
    with pytest.raises(ModelLoadError, match="no builtin model 'nope'; builtin models: tiny-qwen2, small-qwen2"):
        built_model_dir("nope", tmp_path)
