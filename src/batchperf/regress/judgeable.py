"""When a measured figure can be held to a baseline or to the other side of an A/B: the rules the gate
(:mod:`batchperf.regress.gate`) and ``batchperf ab`` (:mod:`batchperf.ab`) share.

- *Client-bound*: a cell whose client, not its server, set its latency (the client-lag check,
  :mod:`batchperf.measure.client_lag`, stored in the record's ``client``) says nothing about the server's
  latencies, nor about its throughput unless the server was kept full (:func:`client_bound_reason`).
- *Arrival timing*: the KV bytes a request held and the padding waste of batches formed under open-loop
  arrivals move with when the requests arrived (:func:`arrival_reason`): reported, never deciding.
- *A capacity record's probe*: a ``batchperf capacity`` result holds, beside its ``capacity`` section, the
  cell as one probe near the capacity measured it: one run of one process, whose latencies and attainment move
  with that process (:func:`capacity_probe_reason`): reported, never deciding; the capacity section decides.
- *An unbracketed search*: a capacity search that stopped (its budget, or a probes folder's end) before its probes
  bracketed the crossing states the highest load that met, a bound, not a capacity (:func:`unbracketed_reason`):
  its capacity figures are not judged.
- *Open loop*: requests that arrive on a schedule set the throughput while the engine keeps up with them, so
  "no change" in throughput says only that it kept up (:func:`open_loop_caveat`); latency shows the rest.
- *Exact*: an exact metric (KV bytes) may differ by float rounding only (:data:`EXACT_REL`).
"""

from __future__ import annotations

from batchperf.measure.kv import depends_on_arrivals
from batchperf.results.record import CellRecord

EXACT_REL = 1e-9  # exact metrics are floats (means of integers): allow only float rounding
# the figures a padded layout ties to which requests shared a batch (hf-static: each request padded to its batch)
ARRIVAL_DEPENDENT = ("kv.kv_bytes_per_request_mean", "counters.padding_waste")


def _catalogue_path(metric: str) -> str:
    """The catalogue path of a metric as a verdict names it: one tenant's is ``PATH[TENANT]`` (the gate's
    ``tenants.p99_ttft_ms[chat]``), and the catalogue's PATH holds no bracket."""
    return metric.partition("[")[0]


def _latency(metric: str) -> bool:
    """A latency (ms) of the cell or of one tenant: what a client that lagged sets, not its server."""
    path = _catalogue_path(metric)
    return path.startswith(("metrics.", "tenants.")) and path.endswith("_ms")


def _throughput(metric: str) -> bool:
    path = _catalogue_path(metric)
    return path.startswith(("metrics.", "tenants.")) and path.endswith("_throughput")


def open_loop_caveat(path: str, record: CellRecord) -> str | None:
    """What a throughput verdict does not say in a cell whose requests arrive on a schedule, or None. (Seen: a
    two-tenant cell's output tok/s gave B/A = 1.0000 in every pair of a release chain: the arrivals' rate.)"""
    if not (_throughput(path) and record.open_loop):
        return None
    return ("open loop: the arrivals set this throughput while the engine keeps up, so no change here says it kept "
            "up, not that it is as fast; judge latency (--metrics p99_ttft_ms)")


def client_bound_note(record: CellRecord, side: str) -> str | None:
    """Why ``record``'s client, not its server, set its latency (``side``: "this run" or "the baseline"), or None.

    The mark is the client-lag check's (:mod:`batchperf.measure.client_lag`), stored in the record's ``client``."""
    if not record.client.get("client_bound"):
        return None
    reasons = record.client.get("reasons") or ["no reason stored"]
    return f"client-bound ({side}): {'; '.join(reasons)}"


def client_bound_reason(path: str, record: CellRecord, side: str) -> str | None:
    """Why ``record``'s client, not its server, set the metric at ``path`` (``side`` names the run), or None: every
    latency of a cell whose client lagged, and its throughput too when the lag also left the server underfed."""
    if not (_latency(path) or _throughput(path)) or (note := client_bound_note(record, side)) is None:
        return None
    if _throughput(path):
        if record.client.get("server_saturated", False):
            return None  # the server was kept full: its throughput is its own
        occupancy = record.client.get("server_occupancy")
        shown = "unknown" if occupancy is None else f"{occupancy:.2f}"
        note += f"; the server was not kept saturated (occupancy {shown}), so its throughput is the client's too"
    return note


def capacity_probe_reason(path: str, record: CellRecord) -> str | None:
    """Why a figure of a capacity record outside its ``capacity`` section does not decide, or None. Seven quiet
    searches on one host: 42 ordered pairs, none called on the capacity, four on that probe's P99 TTFT and
    attainment (+48%, -17 points) (studies/capacity-repeat, "The speed effect")."""
    if not record.capacity or path.startswith("capacity."):
        return None
    return ("one probe's single run near the capacity (a capacity record): reported; the capacity section decides "
            "(docs/traffic.md)")


def unbracketed_reason(path: str, record: CellRecord, side: str) -> str | None:
    """Why ``record``'s capacity figure at ``path`` cannot be judged (``side`` names the run), or None: its search
    stopped before it bracketed the crossing, so no fit (no ``interval_low``) and no load-range stop; records from
    before issue 57 (a bisection's ``bracket_high``) are judged as before."""
    cap = record.capacity
    if not cap or not path.startswith("capacity.") or "interval_low" in cap or "bracket_high" in cap:
        return None
    if cap.get("stopped") not in ("budget", "probes"):
        return None
    return (f"{side}: the capacity search stopped ({cap.get('stopped')}) before its probes bracketed the crossing; "
            f"its max_load is the highest load that met, a bound, not a capacity: search again with a longer "
            f"--budget-min or a --start nearer the capacity")


def not_judged_reason(path: str, record: CellRecord, side: str) -> str | None:
    """Why the metric at ``path`` of ``record`` (``side`` names the run) cannot be judged at all
    (:func:`client_bound_reason`, :func:`unbracketed_reason`), or None."""
    return client_bound_reason(path, record, side) or unbracketed_reason(path, record, side)


def reported_reason(path: str, record: CellRecord) -> str | None:
    """Why the metric at ``path`` of ``record`` is reported, not deciding (:func:`arrival_reason`,
    :func:`capacity_probe_reason`), or None."""
    return arrival_reason(path, record) or capacity_probe_reason(path, record)


def arrival_reason(path: str, record: CellRecord) -> str | None:
    """Why the metric at ``path`` of ``record`` moves with when its requests arrived, so that no baseline can hold it
    to a tolerance (the KV bytes a request held and the padding waste of batches formed under open-loop arrivals),
    or None."""
    return depends_on_arrivals(record.kv, record.open_loop) if path in ARRIVAL_DEPENDENT else None
