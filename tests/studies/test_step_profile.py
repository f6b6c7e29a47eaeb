"""studies/continuous-step/step_profile.py's command line: which (batch, prompt length) cases it measures, and bad sizes refused."""

from __future__ import annotations

import pytest
from tool_module import tool_module


def test_without_batches_it_measures_the_tiny_models_reference_cases() -> None:
    with tool_module("step_profile") as tool:
        args = tool.parse_args([])
    assert args.model == "tiny-qwen2"
    assert args.cases == ((1, 64), (4, 64), (8, 64), (8, 512))


def test_batches_are_measured_at_every_prompt_length_of_the_model_named() -> None:
    with tool_module("step_profile") as tool:
        one = tool.parse_args(["--model", "small-qwen2", "--batches", "1,2,4,8,16"])
        two = tool.parse_args(["--batches", "1,16", "--prompt-lens", "64,512", "--steps", "8"])
    assert one.model == "small-qwen2"
    assert one.cases == ((1, 64), (2, 64), (4, 64), (8, 64), (16, 64))
    assert two.cases == ((1, 64), (1, 512), (16, 64), (16, 512)) and two.steps == 8


@pytest.mark.parametrize("argv, said", [
    (["--batches", "1,x"], "'1,x': give positive integers"),
    (["--batches", "0,4"], "'0,4': give positive integers"),
    (["--batches", ","], "',': give positive integers"),
    (["--prompt-lens", "64"], "--prompt-lens needs --batches"),
])
def test_bad_sizes_are_refused_with_the_fix(argv: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    with tool_module("step_profile") as tool, pytest.raises(SystemExit) as exit_:
        tool.parse_args(argv)
    assert exit_.value.code == 2
    assert said in capsys.readouterr().err
