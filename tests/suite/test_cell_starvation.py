"""A cell whose policy starved a tenant fails, naming it, and its record (with the starved tenant) is still stored
(issue 27). The fake backend delays every token of the batch tenant by 20 s while the chat tenant, whose requests
were sent after the batch tenant's first, is served: a policy that never runs the batch tenant."""

from __future__ import annotations

import json

import pytest
from paths import REPO

STARVING_BACKEND = '''
import dataclasses

import pytest


class StarvesBatch:
    def __init__(self, real):
        self.real = real

    def __getattr__(self, name):
        return getattr(self.real, name)

    def run(self, workload, batch_size, concurrency, **kwargs):
        trace = self.real.run(workload, batch_size, concurrency, **kwargs)
        late = [dataclasses.replace(r, token_times=tuple(t + 20.0 for t in r.token_times)) if r.tenant == "batch"
                else r for r in trace.requests]
        return dataclasses.replace(trace, requests=late, end=max(t for r in late for t in r.token_times))


@pytest.fixture
def batchperf_backend(batchperf_backend):
    return StarvesBatch(batchperf_backend)
'''

TENANTS = """seed = 0
[tenants.batch]
requests = 2
rate = 50.0
prompt_len = 8
output_lens = [2]
priority = 1

[tenants.chat]
requests = 4
rate = 20.0
prompt_len = 8
output_lens = [2]
"""


def test_a_starved_tenant_fails_its_cell_whatever_the_attainment(suite: pytest.Pytester) -> None:
    suite.makeconftest((REPO / "conftest.py").read_text() + STARVING_BACKEND)
    (suite.path / "t.toml").write_text(TENANTS)
    results = suite.path / "out.json"
    result = suite.runpytest("-m", "cpu", "--batchperf-backends=hf-static", "--batchperf-batch-sizes=2",
                             "--batchperf-prompt-lens=8", "--batchperf-concurrency=8", "--batchperf-rounds=1",
                             f"--batchperf-workloads=tenants:{suite.path / 't.toml'}", "-p", "no:cacheprovider",
                             f"--benchmark-json={results}")
    result.assert_outcomes(failed=1, skipped=1)  # the cell; one prompt length: no KV slope to fit
    said = ("starved tenant(s): batch (2*.* s unserved) under policy 'fcfs': backlogged with no token while later "
            "arrivals of another tenant were served (>= * s and *% of the run); never a pass (docs/policies.md)")
    result.stdout.fnmatch_lines([f"E       AssertionError: {said}"])  # the test, the summary: the gate's wording
    result.stdout.fnmatch_lines([f"STARVED cpu-tiny-qwen2-hf-static-*: {said}"])
    (bench,) = json.loads(results.read_text())["benchmarks"]
    info = bench["extra_info"]
    assert info["slo"]["attainment"] == 1.0  # every request met (no SLOs): attainment alone would read as a pass
    assert info["slo"]["starved_tenants"] == 1
    assert info["tenants"]["batch"]["starved"] == 1 and info["tenants"]["chat"]["starved"] == 0
    assert info["tenants"]["batch"]["longest_unserved_s"] >= 20
