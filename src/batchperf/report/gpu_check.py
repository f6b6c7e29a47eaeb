"""The one-screen summary of ``ci/gpu_check.sh``: ``python -m batchperf.report.gpu_check RESULTS AA [--out FILE]``.

From the check's results file (the GPU-tier slice) and its A/A file (two of
those cells run again in a fresh process) it prints, and writes to ``--out``:

- per cell: output tok/s, P99 TTFT and TPOT, decode MBU, prefill MFU, J/token;
- continuous / hf-static output throughput at each batch size and prompt length;
- the A/A spread per gated metric: ``|a − b| / mean`` between the two runs of
  the same cell, the run-to-run noise the GPU floors of ``regress/gate.py``
  must stand above (see docs/gpu.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from batchperf.measure.catalogue import AA_METRICS
from batchperf.results.io import read_results
from batchperf.results.record import CellRecord, ResultsError


def _num(value: float | None, spec: str = ",.1f", scale: float = 1.0) -> str:
    return "-" if value is None else format(value * scale, spec)


def label(r: CellRecord) -> str:
    return f"{r.backend} bs{r.batch_size} p{r.prompt_label}"


def cell_rows(records: list[CellRecord]) -> list[str]:
    header = (f"{'cell':<46} {'out tok/s':>10} {'P99 TTFT ms':>12} {'P99 TPOT ms':>12} {'decode GB/s':>12} "
              f"{'MBU':>6} {'MFU':>6} {'J/token':>8}")
    rows = [header]
    for r in sorted(records, key=lambda r: (r.backend, r.prompt_tokens, r.batch_size)):
        m, e = r.metrics, r.efficiency
        rows.append(f"{r.id:<46} {_num(m.get('output_throughput')):>10} {_num(m.get('p99_ttft_ms')):>12} "
                    f"{_num(m.get('p99_tpot_ms'), ',.2f'):>12} "
                    f"{_num(e.get('decode_bandwidth_bytes_per_s'), ',.2f', 1e-9):>12} "
                    f"{_num(e.get('decode_mbu'), '.1%'):>6} {_num(e.get('prefill_mfu'), '.1%'):>6} "
                    f"{_num(r.telemetry.get('joules_per_output_token'), '.3f'):>8}")
    return rows


def ratio_rows(records: list[CellRecord], ours: str = "continuous", theirs: str = "hf-static") -> list[str]:
    """``ours``/``theirs`` output throughput for each cell both ran (same model, batch, prompt, concurrency)."""
    def key(r: CellRecord) -> tuple[str, str, int, int]:
        return r.model_name, r.prompt_label, r.batch_size, r.concurrency

    base = {key(r): r for r in records if r.backend == theirs}
    rows = []
    for r in sorted((r for r in records if r.backend == ours and key(r) in base), key=key):
        b = base[key(r)].metrics.get("output_throughput")
        ratio = r.metrics["output_throughput"] / b if b else None
        rows.append(f"  {r.model_name} bs{r.batch_size:<3} p{r.prompt_label:<6} c{r.concurrency:<4} "
                    f"{_num(ratio, '.2f')}x")
    return rows or [f"  (no cell ran on both {ours} and {theirs})"]


def aa_spread(first: list[CellRecord], second: list[CellRecord]) -> dict[str, dict[str, float]]:
    """metric -> cell label -> ``|a − b| / mean(a, b)`` for every cell in both runs."""
    again = {r.id: r for r in second}
    spread: dict[str, dict[str, float]] = {m: {} for m in AA_METRICS}
    for r in first:
        if (other := again.get(r.id)) is None:
            continue
        for metric in AA_METRICS:
            a, b = r.metrics.get(metric), other.metrics.get(metric)
            if a is not None and b is not None and a + b > 0:
                spread[metric][label(r)] = abs(a - b) / ((a + b) / 2)
    return spread


def aa_rows(spread: dict[str, dict[str, float]]) -> list[str]:
    cells = sorted({c for per_cell in spread.values() for c in per_cell})
    if not cells:
        return ["  (the A/A run shares no cell with the results)"]
    width = max(len(c) for c in cells)
    rows = [f"  {'metric':<20} " + " ".join(f"{c:>{width}}" for c in cells) + f" {'max':>7}"]
    for metric, per_cell in spread.items():
        values = [per_cell.get(c) for c in cells]
        worst = max((v for v in values if v is not None), default=None)
        rows.append(f"  {metric:<20} " + " ".join(f"{_num(v, '.1%'):>{width}}" for v in values)
                    + f" {_num(worst, '.1%'):>7}")
    return rows


def summary(results: Path, aa: Path | None) -> list[str]:
    records = read_results(results).records
    devices = sorted({str(r.efficiency.get("device") or r.cell.get("device")) for r in records})
    weights = sorted({f"{r.model_name}: {r.weights}" for r in records})
    lines = [f"batchperf gpu-check: {len(records)} cells on {', '.join(devices) or '?'} ({'; '.join(weights)})", ""]
    lines += cell_rows(records)
    lines += ["", "continuous / hf-static, output tok/s:", *ratio_rows(records)]
    if aa is not None:
        again = read_results(aa, "A/A results").records
        lines += ["", "A/A spread: |a - b| / mean of two runs of the same cell, in separate processes",
                  "(the run-to-run noise the GPU gate's floors must stand above):", *aa_rows(aa_spread(records, again))]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m batchperf.report.gpu_check", description=__doc__.split("\n")[0])
    parser.add_argument("results", type=Path, help="the check's results JSON")
    parser.add_argument("aa", type=Path, nargs="?", help="the A/A run's results JSON")
    parser.add_argument("--out", type=Path, help="also write the summary here")
    args = parser.parse_args(argv)
    try:
        lines = summary(args.results, args.aa)
    except ResultsError as exc:
        print(f"batchperf gpu-check: {exc}", file=sys.stderr)
        return 2
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out is not None:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
