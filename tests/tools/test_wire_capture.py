"""tools/wire_capture.py refuses what cannot work before it loads the model or starts a server (issue 38, 11)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tool_module import tool_module

NO_RAW = "cannot capture packets: Operation not permitted; an AF_PACKET socket needs root or CAP_NET_RAW"


def _run(argv: list[str], refused: str | None, monkeypatch: pytest.MonkeyPatch,
         capsys: pytest.CaptureFixture[str]) -> tuple[int, str, float]:
    """The tool's exit code, stderr and seconds, with the privilege probe answering ``refused``; loading the
    model (the first costly step) fails the test."""
    def never(*_: object) -> None:
        raise AssertionError("the model was loaded before the arguments and the privilege were checked")

    with tool_module("wire_capture") as tool:
        monkeypatch.setattr(tool, "capture_refused", lambda: refused)
        monkeypatch.setattr(tool, "load_model", never)
        started = time.monotonic()
        with pytest.raises(SystemExit) as exit_:
            tool.main(argv)
        took = time.monotonic() - started
    return exit_.value.code, capsys.readouterr().err, took


def test_without_cap_net_raw_it_stops_before_loading_the_model(monkeypatch, capsys) -> None:
    code, err, took = _run([], NO_RAW, monkeypatch, capsys)
    assert code == 2
    assert "error: cannot capture packets" in err and "CAP_NET_RAW" in err
    assert "Traceback" not in err
    assert took < 0.5  # once, about two minutes: the model and the vLLM server came first


@pytest.mark.parametrize(("argv", "says"), [
    (["--concurrency", "0,4"], "--concurrency '0,4': give comma-separated integers >= 1"),
    (["--concurrency", "a"], "--concurrency 'a'"),
    (["--num-prompts", "0"], "--num-prompts 0: must be >= 1"),
    (["--scheduling", "fifo,rr"], "--scheduling: rr is not fifo or normal"),
    (["--json", "/nonexistent-folder/out.json"], "its folder /nonexistent-folder does not exist"),
    (["--output-lens", "x"], "--output-lens 'x'"),
])
def test_bad_arguments_are_refused_before_anything_starts(argv, says, monkeypatch, capsys) -> None:
    code, err, took = _run(argv, None, monkeypatch, capsys)
    assert code == 2
    assert says in err
    assert took < 0.5


def test_a_json_that_is_a_folder_is_refused(tmp_path: Path, monkeypatch, capsys) -> None:
    code, err, _ = _run(["--json", str(tmp_path)], None, monkeypatch, capsys)
    assert code == 2 and "is a folder; give a file name" in err
