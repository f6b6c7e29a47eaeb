"""batchperf's pytest plugin: options, one parametrized test per cell, and the summary.

Registered through the ``pytest11`` entry point. The fixtures that load models
and build backends live in the repository's ``fixtures/`` (wired by the root
``conftest.py``); they read the session state this plugin keeps in
``config.stash``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from batchperf.launch.environ import REQUEST_TIMEOUT_ENV, SERVER_URL_ENV
from batchperf.measure.catalogue import SUMMARY, Metric
from batchperf.regress.gate import starvation_note
from batchperf.results.record import CellRecord
from batchperf.suite.matrix import AXES, TIERS, Tier, narrowed
from batchperf.suite.models import MODELS
from batchperf.suite.pool import BackendPool, ModelPool
from batchperf.suite.progress import add_progress_option, register_progress

# Plugins of their own: the regression gate (baselines, --benchmark-compare, the per-cell verdict),
# sharding (--batchperf-shard=I/N) and the KV-cache growth check over the session's cells.
pytest_plugins = ["batchperf.suite.gate_plugin", "batchperf.suite.shard", "batchperf.suite.kv_check",
                  "batchperf.suite.interrupt",  # an interrupted run writes its finished cells, marked incomplete
                  "batchperf.suite.results_path",  # --benchmark-json checked and held before any cell
                  "batchperf.suite.probe_plugin"]  # the machine's own speed, before the first cell and after the last

OPTION_AXES = {
    "models": "models (registry names, see `batchperf models`)",
    "backends": "backends (hf-static, continuous, vllm, …)",
    "batch_sizes": "batch sizes (max requests per batch)",
    "prompt_lens": "prompt lengths: 512, short/medium/long, a range 64-512, or a mix [64,256,512]",
    "concurrency": "concurrencies (max requests in flight)",
    "tp": "tensor-parallel sizes of vllm cells (GPUs per cell; a cell skips when fewer are visible)",
    "workloads": "workloads: synthetic (default), prefix:GROUPS:PREFIX_LEN, trace:PATH[:speed=X][:window=A-B]"
                 "[:block=N], tenants:PATH (docs/traffic.md)",
    "load": "offered-load factors, each a finite number > 0 (default 1): scale a trace's pace, tenants' rates and a "
            "rate: arrival",
    "policies": "batching policies, each NAME or NAME:k=v,k=v: fcfs (default), seed, aimd, priority, fair "
                "(docs/policies.md); continuous runs them all, vllm and vllm-server fcfs and priority, the hf "
                "backends fcfs (a cell a backend cannot run is skipped with the reason)",
}


def add_matrix_options(add: Any) -> None:
    """Options that narrow the matrix; shared by the plugin and `batchperf run`."""
    for axis, what in OPTION_AXES.items():
        add(f"--batchperf-{axis.replace('_', '-')}", dest=f"batchperf_{axis}", default=None, metavar="LIST",
            help=f"comma-separated {what}; replaces the tier's default")
    add("--batchperf-num-prompts", dest="batchperf_num_prompts", default=None, metavar="N",
        help="measured requests per cell (default: the tier's)")
    add("--batchperf-rounds", dest="batchperf_rounds", default=None, metavar="N",
        help="measured rounds per cell (default: the tier's)")
    add("--batchperf-output-lens", dest="batchperf_output_lens", default=None, metavar="LIST",
        help="output tokens per request, cycled over the requests (default: 16,32)")
    add("--batchperf-arrival", dest="batchperf_arrival", default=None, metavar="SPEC",
        help="closed (default: N in flight, a new one as each finishes), burst, or rate:REQ_PER_S[:BURSTINESS]")
    add("--batchperf-slice", dest="batchperf_slice", default=None, metavar="NAME",
        help="only the tier's named slice of cells, ids unchanged: ci (CI's slice of the CPU tier, README)")
    add("--batchperf-device", dest="batchperf_device", default=None, metavar="DEVICE",
        help="run every tier's cells on this device: cpu (slow: for debugging and tests) or cuda "
             "(default: the tier's own)")


MATRIX_SETTINGS = (*AXES, "num_prompts", "rounds", "arrival", "output_lens", "device", "slice")


def matrix_settings(get: Callable[[str], str | None]) -> dict[str, str | None]:
    """The matrix options given, by setting name, for :func:`narrowed`; ``get(dest)`` reads one option."""
    return {key: get(f"batchperf_{key}") for key in MATRIX_SETTINGS}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("batchperf", "batchperf: LLM batching performance cells")
    add_matrix_options(group.addoption)
    group.addoption("--batchperf-model-path", dest="batchperf_model_path", action="append", default=[],
                    metavar="NAME=PATH", help="load model NAME from PATH (a local folder or hub id); repeatable")
    group.addoption("--batchperf-server-url", dest="batchperf_server_url", action="append", default=[],
                    metavar="[BS=]URL", help="a running vLLM server for the vllm-server cells of its model and batch "
                    "size BS (default: its max_num_seqs, where it publishes it); repeatable, one per batch size")
    group.addoption("--batchperf-request-timeout", dest="batchperf_request_timeout", default=None, metavar="SECONDS",
                    help="how long one request to a vllm-server may take before it fails (default: scaled to the "
                    "cell's work: 30 s + 0.25 s per output token per batch a request may queue behind, 60 s to 1 h); "
                    "a request that fails in the warm-up fails its cell at once")
    add_progress_option(group.addoption)


@dataclass
class SessionState:
    tiers: dict[str, Tier]
    models: ModelPool
    backends: BackendPool = field(default_factory=BackendPool)
    records: list[CellRecord] = field(default_factory=list)  # every cell measured in this session


STATE = pytest.StashKey[SessionState]()


def _model_overrides(entries: list[str], tiers: dict[str, Tier]) -> dict[str, str]:
    """NAME=PATH per entry; a NAME that is neither registered nor named in --batchperf-models is a typo, which
    would otherwise be ignored and the model loaded from its default source."""
    known = [*MODELS, *(m for tier in tiers.values() for m in tier.models if m not in MODELS)]
    overrides = {}
    for entry in entries:
        name, sep, path = entry.partition("=")
        if not sep or not name or not path:
            raise pytest.UsageError(f"--batchperf-model-path {entry!r}: expected NAME=PATH, e.g. qwen2.5-0.5b=/models/qwen")
        if name.strip() not in known:
            raise pytest.UsageError(f"--batchperf-model-path {entry}: no model {name.strip()!r} in this run; known "
                                    f"models: {', '.join(known)} (or name a new one in --batchperf-models too)")
        overrides[name.strip()] = path.strip()
    return overrides


def pytest_configure(config: pytest.Config) -> None:
    settings = matrix_settings(config.getoption)
    try:
        tiers = {name: narrowed(tier, **settings) for name, tier in TIERS.items()}
    except ValueError as exc:
        raise pytest.UsageError(f"batchperf: {exc}") from None
    config.stash[STATE] = SessionState(tiers, ModelPool(_model_overrides(config.getoption("batchperf_model_path"),
                                                                         tiers)))
    register_progress(config)
    _server_options(config)


def _server_options(config: pytest.Config) -> None:
    """--batchperf-server-url and --batchperf-request-timeout, checked now (a usage error before any cell) and
    handed to the vllm-server backend through its environment variables."""
    from batchperf.backends.external_server import parse_entries

    if urls := config.getoption("batchperf_server_url"):
        try:
            parse_entries(",".join(urls))
        except ValueError as exc:
            raise pytest.UsageError(f"--batchperf-server-url: {exc}") from None
        os.environ[SERVER_URL_ENV] = ",".join(urls)
    if (timeout := config.getoption("batchperf_request_timeout")) is not None:
        try:
            seconds = float(timeout)
        except ValueError:
            seconds = math.nan
        if not (math.isfinite(seconds) and seconds > 0):
            raise pytest.UsageError(f"--batchperf-request-timeout {timeout}: must be a finite number of seconds > 0")
        os.environ[REQUEST_TIMEOUT_ENV] = repr(seconds)


def state(config: pytest.Config) -> SessionState:
    return config.stash[STATE]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "batchperf_params" not in metafunc.fixturenames:
        return
    params = [
        pytest.param(cell, id=cell.id, marks=[getattr(pytest.mark, cell.tier)])
        for tier in state(metafunc.config).tiers.values()
        for cell in tier.cells()
    ]
    metafunc.parametrize("batchperf_params", params)


def keep_record(config: pytest.Config, record: CellRecord) -> None:
    state(config).records.append(record)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if STATE in session.config.stash:
        for error in state(session.config).backends.close():
            session.config.issue_config_time_warning(pytest.PytestWarning(f"batchperf: closing {error}"), stacklevel=2)


def summary_rows(records: list[CellRecord]) -> list[str]:
    """One row per cell: the catalogue's summary columns ("-": the cell has no such number, e.g. preemptions of
    a backend without that counter), each as wide as its widest entry."""
    def text(m: Metric, value: float | None) -> str:
        return "-" if value is None else format(int(value) if m.fmt == "d" else value, m.fmt)

    table = [[m.column for m in SUMMARY], *([text(m, rec.value(m.path)) for m in SUMMARY] for rec in records)]
    widths = [max(len(row[i]) for row in table) for i in range(len(SUMMARY))]
    names = ["cell", *(rec.id + (" [client-bound]" if rec.client.get("client_bound") else "") for rec in records)]
    return [f"{name:<48} " + " ".join(f"{v:>{w}}" for v, w in zip(row, widths)) for name, row in zip(names, table)]


def client_bound_lines(records: list[CellRecord]) -> list[str]:
    """One line per client-bound cell: its latencies describe the client, not the server (the gate leaves them
    not judged), and why (batchperf.measure.client_lag)."""
    return [f"client-bound {rec.id}: its latencies describe the client, not the server (not judged by the gate"
            + ("" if rec.client.get("server_saturated") else "; nor its throughput: the server was underfed")
            + "): " + "; ".join(rec.client.get("reasons") or [])
            for rec in records if rec.client.get("client_bound")]


def starved_lines(records: list[CellRecord]) -> list[str]:
    """One line per cell whose policy starved a tenant (measure.slo; the cell failed): never a pass."""
    return [f"STARVED {rec.id}: {note}" for rec in records if (note := starvation_note(rec))]


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if STATE not in config.stash:
        return
    st = state(config)
    if not st.records and not st.models.loads:
        return
    terminalreporter.section("batchperf")
    for line in summary_rows(st.records) + client_bound_lines(st.records) + starved_lines(st.records):
        terminalreporter.write_line(line)
    loads = st.models.loads
    terminalreporter.write_line(f"models loaded: {len(loads)}" + (f" ({', '.join(loads)})" if loads else ""))
    if dummies := st.models.dummy_weights():
        terminalreporter.write_line(dummy_weights_note(dummies))


def dummy_weights_note(names: list[str]) -> str:
    """The one summary line that says the numbers came from random weights, and how to measure a checkpoint."""
    return (f"weights: DUMMY for {', '.join(names)} (seeded random weights built from the shipped config.json, "
            f"no download; speed and memory are the architecture's, generated text is meaningless). "
            f"Measure a checkpoint with --batchperf-model-path NAME=PATH")
