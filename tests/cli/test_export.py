"""`batchperf export`: what it refuses before writing or pushing anything, and what a failed write leaves
(issue 26: items 5, 9, 10 and the minors). The exposition itself is in tests/report/test_export*.py."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from paths import DATA

from batchperf.cli import main
from batchperf.results import io as results_io

REAL = DATA / "results_cpu_small.json"


@pytest.fixture
def results(tmp_path: Path) -> Path:
    path = tmp_path / "results.json"
    path.write_bytes(REAL.read_bytes())
    return path


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exc:
        main(["export", *argv])
    assert exc.value.code not in (0, None)
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return str(exc.value.code)


@pytest.mark.parametrize("spelling", ["same", "dotted", "link"])
def test_out_equal_to_its_input_is_refused_and_the_results_file_is_untouched(
        results: Path, capsys: pytest.CaptureFixture[str], spelling: str) -> None:
    before = results.read_bytes()
    out = {"same": results, "dotted": results.parent / "." / results.name,
           "link": results.parent / "link.json"}[spelling]
    if spelling == "link":
        out.symlink_to(results)
    message = refused(capsys, str(results), "--out", str(out))
    assert "--out" in message and "is the results file itself" in message
    assert results.read_bytes() == before


def test_out_that_is_a_folder_is_refused(results: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    message = refused(capsys, str(results), "--out", str(folder))
    assert f"--out {folder}: is a folder" in message and list(folder.iterdir()) == []


def test_out_under_a_file_is_refused(results: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    message = refused(capsys, str(results), "--out", str(blocker / "metrics.om"))
    assert f"--out {blocker / 'metrics.om'}: cannot write it" in message and blocker.read_text() == "x"


def test_a_full_disk_is_a_clear_error_and_leaves_the_old_out_file(
        results: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "metrics.om"
    out.write_text("old\n")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(results_io.os, "fsync", full)
    message = refused(capsys, str(results), "--out", str(out))
    assert "No space left on device" in message and "nothing was written" in message
    assert out.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["metrics.om", "results.json"]


@pytest.mark.parametrize("url", ["http://127.0.0.1:abc", "http://[::1", "ftp://host:9091", "http://:9091",
                                 "http://127.0.0.1:99999"])
def test_a_malformed_push_url_is_refused_before_anything(results: Path, tmp_path: Path, url: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "metrics.om"
    message = refused(capsys, str(results), "--out", str(out), "--push", url)
    assert f"--push {url!r}" in message and not out.exists()


@pytest.mark.parametrize("job", ["", "  "])
def test_an_empty_job_is_refused(results: Path, job: str, capsys: pytest.CaptureFixture[str]) -> None:
    message = refused(capsys, str(results), "--push", "http://127.0.0.1:9091", "--job", job)
    assert "--job" in message and "empty" in message


def test_ctrl_c_during_a_push_is_one_line_exit_130(results: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import prometheus_client

    def interrupted(*args, **kwargs) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(prometheus_client, "push_to_gateway", interrupted)
    with pytest.raises(SystemExit) as exc:
        main(["export", str(results), "--push", "http://127.0.0.1:9091"])
    assert exc.value.code == 130
    assert "interrupted" in capsys.readouterr().err


def test_an_interrupted_run_is_exported_with_a_note(results: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(results.read_text())
    data["batchperf_incomplete"] = {"reason": "interrupted by SIGTERM", "unfinished": ["a", "b"]}
    results.write_text(json.dumps(data))
    assert main(["export", str(results), "--out", str(tmp_path / "m.om")]) == 0
    assert ("note: " + str(results) + " is from an incomplete run (interrupted by SIGTERM, 2 cell(s) unfinished)"
            in capsys.readouterr().err)
