"""The metric catalogue is the one table: every consumer's list derives from it, every number a cell stores has an
entry, and every entry names a number something stores."""

from __future__ import annotations

import re

import pytest
from paths import DATA, REPO
from rule_producers import stored_numbers, uncatalogued
from small_runs import measured_cell

from batchperf.measure import catalogue
from batchperf.measure.catalogue import BY_PATH, CATALOGUE, CUDA, Direction, Metric, Tolerance
from batchperf.results.io import read_results

# what the in-process backends store, measured here; vLLM's cells (and the traffic cells) come from real CPU-tier
# results files (building a
# vLLM engine takes tens of seconds: tests/measure/test_counters_engines.py and tests/backends/test_vllm_server.py
# check fresh vllm and vllm-server records against the catalogue with uncatalogued())
IN_PROCESS = ("hf-static", "continuous", "hf-continuous")


@pytest.fixture(scope="module")
def stored(tiny_model) -> set[str]:
    records = [measured_cell(tiny_model, backend) for backend in IN_PROCESS]
    records += read_results(DATA / "results_cpu_counters.json").records
    # the traffic cells (shared prefixes on vllm and continuous, tenants, a trace): hit rate, send lag, workload
    records += read_results(DATA / "results_cpu_traffic.json").records
    for record in records[:len(IN_PROCESS)]:
        assert uncatalogued(record) == [], f"{record.backend} stores numbers the catalogue has no entry for"
    return stored_numbers(records)


def test_every_entry_names_a_number_a_cell_stores(stored: set[str]) -> None:
    """A CPU entry must be in a real cell's record; a CUDA-only one must at least be written by the source that
    measures it (no GPU here: tests/backends/test_hf_static_gpu_fakes.py runs that code under fakes)."""
    producers = "".join(p.read_text() for p in (REPO / "src" / "batchperf" / "measure").glob("*.py")
                        if p.name != "catalogue.py")
    orphans = []
    for entry in CATALOGUE:
        if entry.devices == CUDA:
            if f'"{entry.name}"' not in producers:
                orphans.append(entry.path)
        elif entry.path not in stored:
            orphans.append(entry.path)
    assert orphans == [], "catalogue entries that no cell stores: remove them, or store the number"


def test_the_gate_history_export_ab_gpu_check_and_summary_read_the_catalogue() -> None:
    from batchperf.ab.run import DEFAULT_METRICS
    from batchperf.regress.gate import GateConfig
    from batchperf.regress.history import METRICS
    from batchperf.report.export import FAMILIES
    from batchperf.report.gpu_check import AA_METRICS
    from batchperf.suite.plugin import summary_rows

    assert GateConfig().rules == catalogue.GATED and all(m.tolerance is not None for m in catalogue.GATED)
    assert METRICS == {m.path: m.direction is Direction.HIGHER for m in catalogue.TRACKED}
    assert [e for f in FAMILIES for e in f.entries] == [m for m in CATALOGUE if m.export]
    assert DEFAULT_METRICS == catalogue.AB_DEFAULT and AA_METRICS == catalogue.AA_METRICS
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
    names = [m.name for m in CATALOGUE]
    assert len(set(names)) == len(names), "a name must mean one metric, whatever its section"


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
