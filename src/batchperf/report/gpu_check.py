"""The one-screen summary of ``ci/gpu_check.sh``: ``python -m batchperf.report.gpu_check RESULTS AA [--ab AB]``.

From the check's results file (the GPU-tier slice), its A/A file (some of those cells run again in a fresh
process) and its A/B file (the same cells with an injected 5% slowdown) it prints, and writes to ``--out``:

- per cell: output tok/s, P99 TTFT and TPOT, decode MBU, prefill MFU, J/token;
- continuous / hf-static output throughput at each batch size and prompt length;
- each cell's SM clock, throttle reasons, temperature and power, and which cells are void (a GPU run);
- the measured floors (:mod:`batchperf.report.gpu_floors`): per gated metric the worst A/A spread (``|a − b| /
  mean`` between the two runs of the same cell), a suggested
  floor, today's floor, the A/B's change and whether each floor catches it; and the gate's own verdict on the
  A/A and the A/B runs (see docs/gpu.md, "The first GPU run").
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from batchperf.report.gpu_floors import aa_spread, ab_change, clock_rows, floor_rows, gate_rows, void_cells
from batchperf.results.io import read_results
from batchperf.results.record import CellRecord, ResultsError


def _num(value: float | None, spec: str = ",.1f", scale: float = 1.0) -> str:
    return "-" if value is None else format(value * scale, spec)


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


def summary(results: Path, aa: Path | None, ab: Path | None = None) -> list[str]:
    records = read_results(results).records
    devices = sorted({str(r.efficiency.get("device") or r.cell.get("device")) for r in records})
    weights = sorted({f"{r.model_name}: {r.weights}" for r in records})
    lines = [f"batchperf gpu-check: {len(records)} cells on {', '.join(devices) or '?'} ({'; '.join(weights)})", ""]
    lines += cell_rows(records)
    lines += ["", "continuous / hf-static, output tok/s:", *ratio_rows(records)]
    again = read_results(aa, "A/A results").records if aa is not None else []
    slower = read_results(ab, "A/B results").records if ab is not None else []
    if any(r.telemetry.get("nvml") == "ok" for r in records):
        lines += ["", "clocks per cell (a cell is void on a > 7% SM clock drop or a thermal/hardware throttle):",
                  *clock_rows(records)]
    else:
        lines += ["", "clocks: no NVML readings in this run (not a GPU, or no nvidia-ml-py): no cell can be void"]
    if void := void_cells(records, again, slower):
        lines += ["void cells, left out of the spreads below:", *(f"  {c}: {why}" for c, why in void.items())]
    if aa is not None:
        tier = records[0].tier if records else "gpu"
        lines += ["", "measured floors: A/A worst = max over cells of |a - b| / mean, two runs of the same cell in "
                      "separate processes;", f"suggested = twice it; A/B = each forward pass 5% slower, against the "
                      f"mean of the two A runs (tier {tier}):",
                  *floor_rows(aa_spread(records, again), ab_change(records, again, slower), tier)]
        lines += ["", "the gate, the slice's run as the baseline:", *gate_rows(records, again, "A/A")]
        if ab is not None:
            lines += gate_rows(records, slower, "A/B")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m batchperf.report.gpu_check", description=__doc__.split("\n")[0])
    parser.add_argument("results", type=Path, help="the check's results JSON")
    parser.add_argument("aa", type=Path, nargs="?", help="the A/A run's results JSON")
    parser.add_argument("--ab", type=Path, help="the injected A/B run's results JSON (BATCHPERF_INJECT_SLOWDOWN=0.05)")
    parser.add_argument("--out", type=Path, help="also write the summary here")
    args = parser.parse_args(argv)
    try:
        lines = summary(args.results, args.aa, args.ab)
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
