"""The metric catalogue is the one table: every consumer's list derives from it, every number a cell stores has an
entry, and every entry names a number something stores."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
from fake_openai_server import fake_server, server_info
from paths import DATA, REPO
from rule_producers import stored_numbers, uncatalogued
from small_runs import measured_cell

from batchperf.measure import catalogue
from batchperf.measure.catalogue import BY_PATH, CATALOGUE, CUDA, LEGACY_CAPACITY, Direction, Metric, Tolerance
from batchperf.results.io import read_results

# what the in-process backends store, measured here; vLLM's cells (and the traffic cells) come from real CPU-tier
# results files (building a
# vLLM engine takes tens of seconds: tests/measure/test_counters_engines.py and tests/backends/test_vllm_server.py
# check fresh vllm and vllm-server records against the catalogue with uncatalogued())
IN_PROCESS = ("hf-static", "continuous", "hf-continuous")


@pytest.fixture(scope="module")
def stored(tiny_model) -> set[str]:
    records = [measured_cell(tiny_model, backend) for backend in IN_PROCESS]
    # a vllm-server cell on a given server (its figures; the client-lag check from its latency histograms)
    with fake_server(root=str(tiny_model.path), vllm_metrics=True, first_token_delay_s=0.01,
                     info=server_info(2)) as server:
        records.append(measured_cell(tiny_model, "vllm-server", server_url=f"2={server.url}"))
    assert uncatalogued(records[-1]) == [], "vllm-server stores numbers the catalogue has no entry for"
    records += read_results(DATA / "results_cpu_counters.json").records
    # the traffic cells (shared prefixes on vllm and continuous, tenants, a trace): hit rate, send lag, workload
    records += read_results(DATA / "results_cpu_traffic.json").records
    # the policies of batchperf's engine (issue 27) on the two tenants: what aimd, seed and fair store of their state
    two = f"tenants:{REPO / 'fixtures' / 'traffic' / 'two_tenants.toml'}"
    policies = [measured_cell(tiny_model, "continuous", "4", "64", "16", workload=two, policy=p)
                for p in ("aimd", "seed", "fair")]
    for record in [*records[:len(IN_PROCESS)], *policies]:
        assert uncatalogued(record) == [], f"{record.backend} stores numbers the catalogue has no entry for"
    records += policies
    return stored_numbers(records)


def test_every_entry_names_a_number_a_cell_stores(stored: set[str]) -> None:
    """A CPU entry must be in a real cell's record; a CUDA-only one must at least be written by the source that
    measures it (no GPU here: tests/backends/test_hf_static_gpu_fakes.py runs that code under fakes)."""
    producers = "".join(p.read_text() for stage in ("measure", "telemetry") for p in
                        (REPO / "src" / "batchperf" / stage).glob("*.py") if p.name != "catalogue.py")
    orphans = []
    capacity = (REPO / "src" / "batchperf" / "capacity" / "search.py").read_text()
    before_57 = json.loads((REPO / "studies" / "capacity-repeat" / "data" / "run-1.json").read_text())
    legacy = before_57["benchmarks"][0]["extra_info"]["capacity"]  # a search's record from before issue 57
    for entry in CATALOGUE:
        if entry.path in LEGACY_CAPACITY:  # read from records before issue 57, no longer written
            if entry.name not in legacy:
                orphans.append(entry.path)
        elif entry.section == "capacity":  # batchperf capacity's results file; tests/cli/test_capacity.py writes one
            if f'"{entry.name}"' not in capacity:
                orphans.append(entry.path)
        elif entry.devices == CUDA:
            if f'"{entry.name}"' not in producers:
                orphans.append(entry.path)
        elif entry.path not in stored:
            orphans.append(entry.path)
    assert orphans == [], "catalogue entries that no cell stores: remove them, or store the number"


def test_the_gate_history_export_ab_gpu_check_and_summary_read_the_catalogue() -> None:
    from batchperf.ab.settings import Settings
    from batchperf.regress.gate import GateConfig
    from batchperf.regress.history import METRICS
    from batchperf.report.export import FAMILIES
    from batchperf.report.gpu_floors import AA_METRICS
    from batchperf.suite.plugin import summary_rows

    assert GateConfig().rules == catalogue.GATED and all(m.tolerance is not None for m in catalogue.GATED)
    assert METRICS == {m.path: m.direction is Direction.HIGHER for m in catalogue.TRACKED}
    assert [e for f in FAMILIES for e in f.entries] == [m for m in CATALOGUE if m.export]
    ab_default = {f.name: f.default for f in dataclasses.fields(Settings)}["metrics"]
    assert ab_default == catalogue.AB_DEFAULT and AA_METRICS == catalogue.AA_METRICS
    header = summary_rows([])[0].split()
    assert " ".join(header[1:]) == " ".join(m.column for m in catalogue.SUMMARY)


def test_entries_are_well_formed() -> None:
    assert len(BY_PATH) == len(CATALOGUE)
    for entry in CATALOGUE:
        assert entry.unit and entry.help, entry.path
        if entry.export:
            assert re.fullmatch(r"[a-z][a-z0-9_]*", entry.export), entry.path
            assert not entry.export.endswith(("_total", "_ms")), entry.path
        if entry.gated:
            assert entry.direction is not Direction.NONE, entry.path
        if entry.scale != 1.0:
            assert entry.export_unit == "seconds" and entry.unit == "ms", entry.path
    # a per-tenant entry repeats a cell-wide name for one tenant's requests (tenants.p99_ttft_ms): one meaning
    names = [m.name for m in CATALOGUE if not m.per_tenant]
    assert len(set(names)) == len(names), "a name must mean one metric, whatever its section"
    for entry in CATALOGUE:
        if entry.per_tenant:
            assert entry.export.startswith("tenant_") or not entry.export, entry.path


def test_a_bad_entry_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="SECTION.KEY"):
        Metric("output_throughput", "tokens/s", Direction.HIGHER, "x")
    with pytest.raises(ValueError, match="devices must be some of cpu, cuda"):
        Metric("metrics.x", "ms", Direction.LOWER, "x", devices=("tpu",))
    with pytest.raises(ValueError, match="a gated metric needs a direction"):
        Metric("metrics.x", "ms", Direction.NONE, "x", tolerance=Tolerance())
    with pytest.raises(ValueError, match="floor for tier 'cpu'"):
        Tolerance({"cpu": -0.1})
    with pytest.raises(KeyError, match="no metric 'nope'"):
        catalogue.by_name("nope")


def test_gpu_floors_are_the_runbooks_until_measured() -> None:
    """Throughput 5-10%, P50 latencies >= 15% and deciding on the GPU tier only, P99s reported there (docs/gpu.md)."""
    assert 0.05 <= BY_PATH["metrics.output_throughput"].floor("gpu") <= 0.10
    for family in ("ttft", "tpot", "e2el"):
        p50 = BY_PATH[f"metrics.p50_{family}_ms"]
        assert p50.floor("gpu") >= 0.15 and p50.decides("gpu") and not p50.judged_on("cpu")
    for family in ("ttft", "tpot", "itl", "e2el"):
        p99 = BY_PATH[f"metrics.p99_{family}_ms"]
        assert p99.judged_on("gpu") and not p99.decides("gpu") and p99.decides("cpu")


def test_a_tolerance_judged_on_some_tiers_needs_their_floors() -> None:
    with pytest.raises(ValueError, match="no floor for the tier"):
        Tolerance({"cpu": 0.1}, tiers=("gpu",))
    with pytest.raises(ValueError, match="at least one tier"):
        Tolerance({"gpu": 0.1}, tiers=())
