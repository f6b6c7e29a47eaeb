"""``batchperf capacity``'s results: what a probe measured, and the capacity record made from it.

A probe is one short run of one cell at a load factor (``--batchperf-load``), written as an ordinary results file,
beside its reference: the same cell at ``REFERENCE_LOAD`` (saturated) in the same process.
The capacity is stored as an ordinary results file too: the cell as measured by the probe nearest the capacity,
with the id ``<cell id>-capacity`` (its load removed from the id and the cell, so the next search compares with this
one whatever load it finds) and a ``capacity`` section (:meth:`batchperf.capacity.search.Capacity.section`). The gate,
``compare``, ``history``, ``export`` and the report read it as they read any cell.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from batchperf.capacity.search import REFERENCE_LOAD, Capacity, ProbeResult
from batchperf.measure.metrics import SLO, SLO_FIELDS
from batchperf.measure.slo import NO_TENANT, attainment
from batchperf.results.io import ResultsFile, read_results, write_results
from batchperf.results.record import CellRecord, ResultsError

SUFFIX = "-capacity"
_LOAD_IN_ID = re.compile(r"-load[0-9.]+(?=$|-)")  # the load axis in a cell id (suite.matrix): dropped here


def probe_records(results: ResultsFile, load: float) -> tuple[CellRecord, CellRecord | None]:
    """The probe's cell (at ``load``) and its reference (the same cell at ``REFERENCE_LOAD``, run in the same
    process; None when the file has none); ResultsError when the matrix ran another number of cells."""
    records = results.records
    at_load = [r for r in records if r.load == load]
    references = [r for r in records if r.load == REFERENCE_LOAD]
    expected = 1 if load == REFERENCE_LOAD else 2
    if len(at_load) != 1 or len(records) not in (1, expected) or len(references) > 1:
        ids = ", ".join(r.id for r in at_load or records)
        raise ResultsError(results.path, f"a capacity probe must run exactly one cell, it ran {len(at_load or records)}"
                           f" ({ids})", "Narrow the matrix options (--batchperf-backends, --batchperf-batch-sizes, "
                           "...) or pass -- -k CELL_ID")
    return at_load[0], references[0] if references else None


def reference_rate(record: CellRecord | None) -> float | None:
    """Requests/s the saturated reference round served (``metrics.request_throughput``); None without one."""
    rate = None if record is None else record.value("metrics.request_throughput")
    return rate if rate else None


def probe_result(record: CellRecord, reference: float | None = None) -> ProbeResult:
    """A probe's requests met and offered, pooled over its measured rounds, and its offered rate.

    With raw traces each round's requests are judged again against the workload's SLOs (``workload.slos``;
    measure.slo.attainment, the definition the ``slo`` section uses) and the rounds are summed, so a probe of R
    rounds counts R × its workload's requests; without traces it counts the ``slo`` section's one (median) round.
    The offered rate is over the arrival span (``RunTrace.arrival_rate``, the mean over the rounds): the drain
    after the last arrival measures the engine, and counting it made a slower engine read a lower offered rate at
    the same load. Without traces, offered ÷ the run's duration (the only figure such a record has).
    ``reference``: the reference round's rate (:func:`reference_rate`), carried along."""
    offered, met = record.value("slo.offered"), record.value("slo.met")
    duration = record.value("metrics.duration")
    if offered is None or met is None or not duration:
        raise ResultsError(record.where, "the cell stores no slo.offered / slo.met / metrics.duration",
                           "Run the probe with a batchperf that measures SLO attainment (issue 24)")
    if not record.traces:
        return ProbeResult(round(met), round(offered), offered / duration, reference)
    traces = record.run_traces()
    spans = [r for r in (trace.arrival_rate for trace in traces) if r is not None]
    rate = sum(spans) / len(spans) if spans else offered / duration
    slos = {name: SLO(**{k: v for k, v in slo.items() if k in SLO_FIELDS})
            for name, slo in (record.raw("workload.slos", {}) or {}).items()}
    per_tenant = {name: int(block["offered"]) for name, block in record.tenants.items() if "offered" in block}
    rounds = [attainment(trace, slos, per_tenant or {NO_TENANT: round(offered)}) for trace in traces]
    return ProbeResult(sum(r.met for r in rounds), sum(r.offered for r in rounds), rate, reference)


def base_id(cell_id: str) -> str:
    return _LOAD_IN_ID.sub("", cell_id)


def capacity_record(probe: CellRecord, capacity: Capacity) -> CellRecord:
    """``probe`` (the run at the capacity load) as the capacity cell: its id, no load, the capacity section."""
    cell = {k: v for k, v in probe.cell.items() if k != "load"}
    cell["id"] = base_id(probe.id) + SUFFIX
    data = {k: v for k, v in probe.to_dict().items() if k not in ("gate", "gate_remeasured")}  # judged on its own
    data |= {"cell": cell, "capacity": capacity.section()}
    return CellRecord.from_dict(data, where=f"capacity of {probe.id}")


def write_capacity(path: Path, probe_file: Path, capacity: Capacity, load: float) -> CellRecord:
    """Write the capacity results file at ``path`` from a probe file near the capacity (its cell at ``load``, not its
    reference)."""
    results = read_results(probe_file, "probe results")
    fullname, probe = next((name, r) for name, r in results.cells.items() if r.load == load)
    record = capacity_record(probe, capacity)
    name = fullname.split("[", 1)[0] + f"[{record.id}]"
    bench: dict[str, Any] = {**results.benches[fullname], "fullname": name, "name": name.split("::")[-1],
                             "extra_info": record.to_dict()}
    write_results(path, results.header, [bench])
    return record
