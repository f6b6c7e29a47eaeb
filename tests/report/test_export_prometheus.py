"""``batchperf export`` into a REAL Prometheus stack: Debian's prometheus-pushgateway and prometheus, started on
127.0.0.1 (free ports, temporary data folders, stopped at the end, also on failure). A real results file is
pushed, Prometheus scrapes the gateway, and its HTTP API must give back the results file's numbers exactly.
``promtool check metrics`` must accept the exported text."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from paths import DATA, REPO

from batchperf.cli import main
from batchperf.launch.server_process import ServerProcess, free_port
from batchperf.results.io import read_results

REAL = DATA / "results_cpu_small.json"
BINARIES = ("prometheus-pushgateway", "prometheus", "promtool")
MISSING = [b for b in BINARIES if shutil.which(b) is None]
pytestmark = pytest.mark.skipif(
    bool(MISSING), reason=f"{', '.join(MISSING)} not on PATH: install them with "
    "`apt-get install prometheus prometheus-pushgateway` (Debian/Ubuntu; .ci/run does), or put the binaries on PATH")
CELL = "cpu-tiny-qwen2-hf-static-bs4-p64-c8"


def serving(server: ServerProcess, port: int, timeout_s: float) -> Iterator[str]:
    """A fixture's body: the server's URL while it runs, stopped at the end also on failure."""
    server.start(timeout_s)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def pushgateway(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    # its own persistence file (Debian's default is a shared /var/lib/prometheus/pushgateway.data)
    server = ServerProcess(["prometheus-pushgateway", f"--web.listen-address=127.0.0.1:{port}",
                            f"--persistence.file={tmp_path / 'pushgateway.data'}"],
                           f"http://127.0.0.1:{port}/-/healthy", name="pushgateway")
    yield from serving(server, port, 60)


@pytest.fixture
def prometheus(tmp_path: Path, pushgateway: str) -> Iterator[str]:
    port = free_port()
    config = tmp_path / "prometheus.yml"
    # honor_labels: the pushed job/fingerprint labels stay as they were pushed (not exported_job)
    config.write_text(json.dumps({  # JSON is YAML
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": "pushgateway", "honor_labels": True,
                            "static_configs": [{"targets": [pushgateway.removeprefix("http://")]}]}],
    }))
    server = ServerProcess(["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                            f"--web.listen-address=127.0.0.1:{port}"],
                           f"http://127.0.0.1:{port}/-/ready", name="prometheus")
    yield from serving(server, port, 120)


def query(prometheus: str, promql: str, timeout_s: float = 60.0) -> list[dict]:
    """The instant vector of ``promql``, waiting until Prometheus has scraped it."""
    deadline = time.monotonic() + timeout_s
    while True:
        url = f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        if body["data"]["result"] or time.monotonic() > deadline:
            return body["data"]["result"]
        time.sleep(0.5)


def test_pushed_results_reach_prometheus_with_the_results_files_values(
        tmp_path: Path, pushgateway: str, prometheus: str) -> None:
    out = tmp_path / "results.om"
    before = REAL.read_bytes()
    assert main(["export", str(REAL), "--format", "openmetrics", "--out", str(out), "--push", pushgateway]) == 0
    assert REAL.read_bytes() == before

    record = read_results(REAL).find("", CELL)
    assert record is not None
    p99 = query(prometheus, f'batchperf_ttft_seconds{{cell_id="{CELL}",stat="p99"}}')
    tput = query(prometheus, f'batchperf_output_throughput_tokens_per_second{{cell_id="{CELL}"}}')
    assert len(p99) == 1 and len(tput) == 1, json.dumps(p99)
    assert float(p99[0]["value"][1]) == record.metrics["p99_ttft_ms"] / 1000  # exactly: seconds, as stored
    assert float(tput[0]["value"][1]) == record.metrics["output_throughput"]
    labels = tput[0]["metric"]
    assert labels["job"] == "batchperf" and labels["fingerprint"] == "cpu-amd-epyc-2c-9bb45cf7fc"
    assert (labels["backend"], labels["batch_size"], labels["prompt_len"], labels["concurrency"]) == (
        "hf-static", "4", "64", "8")
    assert labels["torch_version"] == "2.13.0+cpu" and labels["commit"].startswith("6de10eb")

    checked = subprocess.run(["promtool", "check", "metrics"], input=out.read_bytes(), capture_output=True,
                             timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout + checked.stderr == b""  # no lint complaint either


def test_runs_of_two_machines_do_not_overwrite_each_other(tmp_path: Path, pushgateway: str) -> None:
    data = json.loads(REAL.read_text())
    other = tmp_path / "other.json"
    data["machine_info"]["batchperf"]["key"] = "cpu-other-box-0123456789"
    other.write_text(json.dumps(data))
    for path in (REAL, other, REAL):  # the second push of a machine replaces its first
        assert main(["export", str(path), "--push", pushgateway]) == 0
    with urllib.request.urlopen(f"{pushgateway}/api/v1/metrics", timeout=10) as response:
        groups = json.load(response)["data"]
    keys = sorted((g["labels"]["job"], g["labels"]["fingerprint"]) for g in groups)
    assert keys == [("batchperf", "cpu-amd-epyc-2c-9bb45cf7fc"), ("batchperf", "cpu-other-box-0123456789")]


def test_promtool_is_a_real_check(tmp_path: Path) -> None:
    """promtool must reject what breaks the conventions, or its pass above means nothing."""
    bad = b"# HELP requests Requests.\n# TYPE requests counter\nrequests 3\n"
    checked = subprocess.run(["promtool", "check", "metrics"], input=bad, capture_output=True, timeout=60)
    assert checked.returncode != 0 and b"_total" in checked.stdout + checked.stderr


def nightly_merge(tmp_path: Path, pushgateway: str) -> subprocess.CompletedProcess[str]:
    """ci/nightly.sh in --merge mode on the real results file (no cell runs) with BATCHPERF_PUSHGATEWAY set."""
    import os
    import sys

    repo = REPO
    return subprocess.run(
        ["bash", str(repo / "ci" / "nightly.sh"), "--python", sys.executable, "--tier", "cpu", "--merge", str(REAL),
         "--out", str(tmp_path / "out"), "--history", str(tmp_path / "history"), "--baselines", str(tmp_path / "bl")],
        capture_output=True, text=True, cwd=repo, timeout=300,
        env={**os.environ, "BATCHPERF_PUSHGATEWAY": pushgateway, "GITHUB_STEP_SUMMARY": ""})


@pytest.mark.slow  # the nightly's report and history steps: ~15-40 s
def test_the_nightly_job_pushes_when_a_pushgateway_is_set(tmp_path: Path, pushgateway: str) -> None:
    run = nightly_merge(tmp_path, pushgateway)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "push to the Pushgateway" in run.stdout and (tmp_path / "out" / "results.om").is_file()
    with urllib.request.urlopen(f"{pushgateway}/api/v1/metrics", timeout=10) as response:
        (group,) = json.load(response)["data"]
    assert group["labels"] == {"job": "batchperf", "fingerprint": "cpu-amd-epyc-2c-9bb45cf7fc"}
    assert "batchperf_ttft_seconds" in group


@pytest.mark.slow  # the nightly's report and history steps: ~15-40 s
def test_the_nightly_job_fails_clearly_when_the_pushgateway_is_down(tmp_path: Path) -> None:
    run = nightly_merge(tmp_path, f"http://127.0.0.1:{free_port()}")
    assert run.returncode != 0
    assert "failed: [Errno 111] Connection refused" in run.stderr and "the push failed" in run.stderr
    assert (tmp_path / "out" / "report" / "index.html").is_file()  # everything before the push still happened
