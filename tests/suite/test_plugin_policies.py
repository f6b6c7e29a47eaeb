"""--batchperf-policies end to end (issue 27): policy cells run on the continuous engine and record what the policy
did; a backend that cannot run a policy skips that cell with the reason while the others run; a bad entry is a
usage error before any cell."""

from __future__ import annotations

import json

import pytest
from paths import REPO

TWO = f"tenants:{REPO / 'fixtures' / 'traffic' / 'two_tenants.toml'}"
CELLS = ["-m", "cpu", "--batchperf-batch-sizes=4", "--batchperf-prompt-lens=64", "--batchperf-concurrency=16",
         "--batchperf-rounds=1", "-p", "no:cacheprovider", f"--batchperf-workloads={TWO}"]
# one small tenant with a TTFT and a TPOT SLO (aimd's target): nobody to starve, whatever the machine's load
ONE = """seed = 0
[tenants.chat]
requests = 6
rate = 8.0
prompt_len = "16-32"
output_lens = [4, 8]
slo = { ttft_ms = 500, tpot_ms = 100 }
"""


def test_an_unknown_policy_is_a_usage_error_naming_the_known(suite: pytest.Pytester) -> None:
    result = suite.runpytest(*CELLS, "--batchperf-backends=continuous", "--batchperf-policies=fcfs,lifo")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--batchperf-policies entry 'lifo': unknown policy 'lifo'*known policies: fcfs, "
                                 "seed, aimd, priority, fair*"])


def test_a_parameter_out_of_range_is_a_usage_error_naming_the_bound(suite: pytest.Pytester) -> None:
    result = suite.runpytest(*CELLS, "--batchperf-backends=continuous", "--batchperf-policies=aimd:decrease=0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--batchperf-policies entry 'aimd:decrease=0'*decrease must be in*"])


def test_policies_run_on_continuous_and_a_backend_that_cannot_is_skipped_with_the_reason(suite: pytest.Pytester
                                                                                          ) -> None:
    out = suite.path / "out.json"
    (suite.path / "one.toml").write_text(ONE)
    result = suite.runpytest(*CELLS, "--batchperf-backends=hf-static,continuous", "--batchperf-policies=fcfs,aimd",
                             f"--batchperf-workloads=tenants:{suite.path / 'one.toml'}", f"--benchmark-json={out}",
                             "-rs")
    result.assert_outcomes(passed=3, skipped=2)  # hf-static's aimd cell; the KV-growth check (one prompt length)
    result.stdout.fnmatch_lines(["*backend 'hf-static' cannot run it: policy 'aimd' is not one hf-static runs: it runs fcfs*"])
    infos = {b["extra_info"]["cell"]["id"]: b["extra_info"] for b in json.loads(out.read_text())["benchmarks"]}
    aimd = next(i for k, i in infos.items() if k.endswith("-polaimd"))
    assert aimd["cell"]["policy"] == "aimd" and aimd["cell"]["backend"] == "continuous"
    assert aimd["policy"]["name"] == "aimd" and aimd["policy"]["engine"] == "batchperf"
    assert aimd["policy"]["params"]["decrease"] == 0.9 and aimd["policy"]["displaced"] == 0
    assert 1 <= aimd["policy"]["cap_min"] <= aimd["policy"]["cap_final"] <= aimd["policy"]["cap_max"] <= 4
    static = next(i for k, i in infos.items() if "hf-static" in k)
    assert "policy" not in static["cell"]  # fcfs: the id and the identity of the cell as before
    assert static["policy"] == {"engine": "hf-static", "name": "fcfs", "text": "fcfs", "label": "fcfs", "params": {}}
    fcfs = next(i for k, i in infos.items() if "continuous" in k and "-pol" not in k)
    assert fcfs["policy"]["name"] == "fcfs" and fcfs["policy"]["engine"] == "batchperf"
    for info in infos.values():
        assert info["slo"]["starved_tenants"] == 0 and info["tenants"]["chat"]["starved"] == 0
