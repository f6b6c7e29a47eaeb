"""Code in a model folder never runs (issue 26, item 15): a folder whose config or tokenizer names its own
Python code (``auto_map``) is loaded with ``trust_remote_code=False`` everywhere — a checkpoint, its
tokenizer, dummy weights from its config — so transformers never asks "Do you wish to run the custom code?"
(here a user answering "y" is simulated) and the folder's Python file never runs."""

from __future__ import annotations

import builtins
import json
from pathlib import Path

import pytest
from paths import DATA

from batchperf.backends.dummy import build_dummy
from batchperf.backends.model import ModelLoadError, ModelSpec, from_pretrained

EVIL = """
from pathlib import Path
Path({marker!r}).write_text("the folder's code ran")
from transformers import PretrainedConfig, PreTrainedModel, PreTrainedTokenizerFast
class EvilConfig(PretrainedConfig):
    model_type = "batchperf-evil"
class EvilModel(PreTrainedModel):
    config_class = EvilConfig
class EvilTokenizer(PreTrainedTokenizerFast):
    pass
"""


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """Every prompt transformers shows; each answered "y", as a user at `pytest -s` might."""
    import transformers.dynamic_module_utils as dynamic

    prompts: list[str] = []

    def answer(prompt: str = "") -> str:
        prompts.append(prompt)
        return "y"

    monkeypatch.setattr(builtins, "input", answer)
    monkeypatch.setattr(dynamic, "HF_MODULES_CACHE", str(tmp_path / "modules"))  # were it copied, not in ~/.cache
    return prompts


def evil_folder(tmp_path: Path, config_code: bool) -> tuple[Path, Path]:
    """A model folder whose ``evil.py`` writes ``marker`` when imported; its config names that code
    (``config_code``: an unknown model type only that code defines) or a known architecture while its
    tokenizer names the code."""
    folder, marker = tmp_path / "model", tmp_path / "MARKER"
    folder.mkdir()
    (folder / "evil.py").write_text(EVIL.format(marker=str(marker)))
    config = json.loads((DATA / "configs" / "qwen2.5-7b-instruct.json").read_text())
    config.update(num_hidden_layers=1, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=128)
    if config_code:
        config.update(model_type="batchperf-evil", architectures=["EvilModel"],
                      auto_map={"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"})
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "tokenizer_config.json").write_text(json.dumps({"auto_map": {"AutoTokenizer": ["evil.EvilTokenizer",
                                                                                             "evil.EvilTokenizer"]}}))
    return folder, marker


SPEC = ModelSpec("evil", "local/evil", tier="cpu", dtype="float32")


@pytest.mark.parametrize("config_code", [True, False], ids=["config", "tokenizer"])
def test_a_checkpoints_own_code_never_runs(tmp_path: Path, asked: list[str], config_code: bool) -> None:
    folder, marker = evil_folder(tmp_path, config_code)
    with pytest.raises(ModelLoadError, match="did not load from"):
        from_pretrained(SPEC, folder)
    assert asked == [] and not marker.exists()


def test_dummy_weights_from_a_config_with_its_own_code_never_run_it(tmp_path: Path, asked: list[str]) -> None:
    folder, marker = evil_folder(tmp_path, config_code=True)
    with pytest.raises(ModelLoadError, match="dummy weights could not be built"):
        build_dummy(ModelSpec("evil", "local/evil", tier="gpu", weights="dummy"), folder)
    assert asked == [] and not marker.exists()
