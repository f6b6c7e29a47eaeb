"""A line of the report joins only cells that differ in what is plotted along x (issue 38), and user strings are
drawn as plain text (defect 6)."""

from __future__ import annotations

from pathlib import Path

from gate_samples import cell_info, results_file
from paths import DATA

from batchperf.measure.metrics import SLO
from batchperf.measure.slo import slo_summary
from batchperf.measure.trace import RequestTrace, RunTrace
from batchperf.report import build_report
from batchperf.report.plots import Series, batch_study
from batchperf.results.io import read_many

FILES = [DATA / "results_cpu_traffic.json", DATA / "results_cpu_small.json"]


def _identity(c) -> tuple:
    return (c.cell.get("workload", ""), c.cell.get("policy", ""), c.cell.get("load", 1), str(c.cell.get("arrival")))


def test_no_series_on_the_batch_size_curves_mixes_workloads() -> None:
    cells = [r for f in read_many(FILES) for r in f.records]
    drawn = batch_study(cells)
    assert drawn and all(not c.cell.get("workload") and not c.cell.get("policy") for c in drawn)
    for cells_here in (drawn, cells):  # and Series alone keeps them apart, whatever it is given
        series = Series(cells_here)
        lines: dict[tuple, list] = {}
        for c in cells_here:
            lines.setdefault((series.key(c), c.prompt_label), []).append(c)
        for key, mine in lines.items():
            assert len({_identity(c) for c in mine}) == 1, f"{key} mixes {sorted({c.id for c in mine})}"
            assert len({c.batch_size for c in mine}) == len(mine), f"{key} has two points at one batch size"


def test_a_line_over_load_or_concurrency_keeps_the_batch_size_and_workload_apart() -> None:
    cells = [r for f in read_many(FILES) for r in f.records]
    for x in ("load", "concurrency"):
        series = Series(cells, x=x)
        for c in cells:
            assert dict(series.key(c))["workload"] == c.cell.get("workload", "synthetic")
            assert "batch_size" in dict(series.key(c))


def test_the_report_draws_traffic_cells_in_their_own_figure(tmp_path: Path) -> None:
    page = build_report(FILES, tmp_path / "r").read_text()
    assert "src='traffic_cells.png'" in page
    knees = page.split("Knees and best batch sizes", 1)[1].split("<h2>", 1)[0]
    assert "wtenants" not in knees and "wtrace" not in knees  # the knee table is the batch-size study's


def test_a_tenant_named_like_math_text_is_drawn_as_plain_text(tmp_path: Path) -> None:
    requests = [RequestTrace(i, 10, 2, 0.1 * i, 0.1 * i + 0.05, (0.1 * i + 0.2, 0.1 * i + 0.3), sent=0.1 * i,
                             tenant="$\\foo$" if i % 2 else "batch") for i in range(8)]
    trace = RunTrace("continuous", 4, 8, requests, end=max(r.finished for r in requests))
    record = cell_info("cpu-tiny-qwen2-continuous-bs4-p64-c8-wtenants")
    record.cell |= {"backend": "continuous", "workload": "tenants:two.toml"}
    record.slo, record.tenants = slo_summary(trace, {"$\\foo$": SLO(ttft_ms=250), "batch": SLO(e2el_ms=400)})
    record.traces = [trace.to_dict()]
    record.kv["kv_tokens_per_request_mean"] = 12.0  # as real cells store beside the bytes
    # matplotlib once parsed the name as math text ("Unknown symbol: \\foo") and wrote no page
    index = build_report([results_file(tmp_path / "r.json", [record])], tmp_path / "r")
    assert ">$\\foo$<" in index.read_text()
    for name in ("tenant_latency_cdf.png", "run_timeline.png", "attainment_vs_load.png"):
        assert (tmp_path / "r" / name).stat().st_size > 10_000, name


def test_a_tenant_named_with_a_leading_underscore_is_listed_in_the_legend(tmp_path: Path, monkeypatch) -> None:
    """matplotlib leaves out of a legend every label starting with "_": a tenant called "_batch" vanished from it."""
    import matplotlib.axes

    shown: list[str] = []
    legend = matplotlib.axes.Axes.legend

    def spy(ax, *args, **kwargs):
        made = legend(ax, *args, **kwargs)
        shown.extend(t.get_text() for t in made.get_texts())
        return made

    monkeypatch.setattr(matplotlib.axes.Axes, "legend", spy)
    requests = [RequestTrace(i, 10, 2, 0.1 * i, 0.1 * i + 0.05, (0.1 * i + 0.2, 0.1 * i + 0.3), sent=0.1 * i,
                             tenant="_batch" if i % 2 else "chat") for i in range(8)]
    trace = RunTrace("continuous", 4, 8, requests, end=max(r.finished for r in requests))
    record = cell_info("cpu-tiny-qwen2-continuous-bs4-p64-c8-wtenants")
    record.cell |= {"backend": "continuous", "workload": "tenants:two.toml"}
    record.slo, record.tenants = slo_summary(trace, {"_batch": SLO(e2el_ms=400), "chat": SLO(ttft_ms=250)})
    record.traces = [trace.to_dict()]
    record.kv["kv_tokens_per_request_mean"] = 12.0
    build_report([results_file(tmp_path / "r.json", [record])], tmp_path / "r")
    assert any(text.lstrip("\u200b").startswith("_batch (n=") for text in shown), shown
    assert any(text.startswith("chat (n=") for text in shown), shown
