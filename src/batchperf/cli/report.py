"""``batchperf report RESULTS.json [more.json ...] --out DIR``: a static HTML page with PNG plots.

``batchperf report CHAIN_DIR --out DIR`` (a ``batchperf chain`` folder, its ``chain.json``, or ``ab.json`` files in
release order) draws the release-over-release plot of each cell instead (:mod:`batchperf.report.chain_plots`);
given beside results files, that page is ``DIR/chain.html``.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", nargs="+", type=Path, metavar="RESULTS.json",
                        help="results files written by `pytest perf_tests --benchmark-json=...`; or a `batchperf "
                             "chain` folder (or its chain.json, or ab.json files in release order): the release-over-"
                             "release plot per cell")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="folder for index.html and the PNGs (created; existing figures are replaced)")


def chain_report(inputs: list[Path], out: Path, page: str) -> Path:
    """One release-over-release PNG per cell of the chain ``inputs`` hold, and ``out/page``."""
    from batchperf.releases.chain_report import levels, load, render_chain_markdown
    from batchperf.report.chain_plots import file_name, release_plot, write_chain_page

    chain = load(inputs)
    out.mkdir(parents=True, exist_ok=True)
    figures = [(lv.cell, release_plot(lv, out / file_name(lv.cell))) for lv in levels(chain)]
    return write_chain_page(out, figures, render_chain_markdown(chain), page)


def main(args: argparse.Namespace) -> int:
    from batchperf.releases.chain_report import is_chain_input
    from batchperf.report import build_report

    chains = [p for p in args.results if is_chain_input(p)]
    results = [p for p in args.results if p not in chains]
    try:
        index = build_report(results, args.out) if results else None
        if chains:
            page = chain_report(chains, args.out, "chain.html" if results else "index.html")
            index = index or page
    except ValueError as exc:
        raise SystemExit(f"batchperf report: {exc}") from None
    except OSError as exc:  # a full disk, a read-only folder, a file where the folder should be
        where = f" ({exc.filename})" if exc.filename else ""
        raise SystemExit(f"batchperf report: cannot write the report into {args.out}{where}: "
                         f"{exc.strerror or exc}; free space or give another --out (the results are only read; "
                         "figures already written there may be from this run or an older one)") from None
    except Exception as exc:  # noqa: BLE001 - the readers name what they check; anything else is still one line
        raise SystemExit(f"batchperf report: failed on {', '.join(map(str, args.results))}: {type(exc).__name__}: "
                         f"{exc}; check that each is a results file, a chain folder or an ab.json as batchperf wrote "
                         "it") from None
    print(f"batchperf report: wrote {index}")
    return 0
