"""What ``batchperf ab`` prints (``batchperf.ab.report``): the headline of a run, its rounds and kept servers, the
summary line with the exit code's meaning, and the same table on a terminal and in Markdown."""

from __future__ import annotations

from pathlib import Path

from ab_fakes import fingerprint
from rich.console import Console

from batchperf.ab.cell import CellState
from batchperf.ab.env import Environment, Probe, SideRun
from batchperf.ab.report import (
    headline,
    kept_text,
    machine_text,
    render_ab_markdown,
    render_rich,
    rounds_text,
    summary,
    wait_text,
)
from batchperf.ab.result import AbResult, Pair
from batchperf.ab.settings import Settings
from batchperf.ab.stats import SequentialTest
from batchperf.ab.warmup import RoundsChoice, Warmup
from batchperf.regress.machine import SessionProbes
from batchperf.regress.verdict import Verdict
from batchperf.telemetry.probe import MachineProbe


def ab_result(**kwargs: object) -> AbResult:
    s = Settings(Environment("A", Path("/py/a")), Environment("B", Path("/py/b"), (("VLLM_X", "1"),)), ("-m", "cpu"),
                 Path("/tmp/ab"), keep_servers=bool(kwargs.pop("keep_servers", False)),
                 restart_servers_every=kwargs.pop("restart_servers_every", 3))  # type: ignore[arg-type]
    probes = {"A": Probe(fingerprint(), "", ""), "B": Probe(fingerprint(vllm="0.32.0"), "", "")}
    cells = {"c1": CellState("c1", "n1", verdict=Verdict.REGRESSION, settled_at=6),
             "c2": CellState("c2", "n2", verdict=Verdict.NO_CHANGE, settled_at=8)}
    test = SequentialTest("signed-rank", level=0.0123)
    result = AbResult(s, probes, test, "simulated", cells, **kwargs)  # type: ignore[arg-type]
    result.pairs.extend(Pair(i, ("A", "B"), {}, load) for i, load in ((1, 0.5), (2, 1.5), (3, 1.0)))
    return result


def test_the_headline_names_both_sides_the_pairs_and_what_differs() -> None:
    lines = headline(ab_result(status="done", elapsed_s=90.0, only_in={"B": ["c9"]}))
    assert lines[0] == "A = /py/a (checkout .)" and lines[1] == "B = /py/b VLLM_X=1 (checkout .)"
    assert lines[2] == ("3 pair(s) of fresh processes (A B, B A, …) in 1.5 min; rounds per process not yet known; "
                        "status: done")
    assert "machine load (1-min average, at each pair): min 0.50, median 1.00, max 1.50" in lines
    assert ("intervals: Wilcoxon signed-rank on ln(B/A) per pair, Hodges-Lehmann estimate, per-look level 0.0123 "
            "(simulated)") in lines
    assert "versions that differ: vllm - → 0.32.0" in lines
    assert "environment variables that differ: VLLM_X - → 1" in lines
    assert lines[-1] == "only in B (not compared): c9"


def test_a_stopped_run_says_why_and_its_warm_up() -> None:
    result = ab_result(status="budget", reason="--max-pairs 3 spent", warmup=Warmup(False, "--no-warmup"))
    lines = headline(result)
    assert lines[2].endswith("status: budget (--max-pairs 3 spent)") and lines[3] == "warm-up: none (--no-warmup)"


def test_the_rounds_given_or_chosen() -> None:
    assert rounds_text(ab_result()) == "rounds per process not yet known"
    assert rounds_text(ab_result(rounds=RoundsChoice(7, 7, "given"))) == "7 round(s) per process (given)"
    chosen = ab_result(rounds=RoundsChoice(10, None, "the warm-up: a start-up 10.0 s / a round 1.00 s"))
    assert rounds_text(chosen) == "10 round(s) per process, chosen from the warm-up: a start-up 10.0 s / a round 1.00 s"


def test_kept_servers_are_named_with_their_starts() -> None:
    result = ab_result(keep_servers=True, kept_servers={"A": [{"name": "vllm", "starts": 1}], "B": []})
    assert kept_text(result).endswith("; A: vllm started 1x; B: none started")
    assert kept_text(result) in headline(result)


def test_kept_servers_say_how_often_and_when_fresh_ones_started() -> None:
    from batchperf.ab.kept import ServerStart

    result = ab_result(keep_servers=True, restart_servers_every=4,
                       server_starts=[ServerStart(1, "B", in_warmup=True), ServerStart(6, "A")],
                       kept_servers={"A": [{"name": "vllm", "starts": 2}], "B": [{"name": "vllm", "starts": 2}]})
    assert kept_text(result) == ("servers kept across pairs (--keep-servers), fresh ones every 4 pair(s) "
                                 "(--restart-servers-every), so that a verdict samples several server levels; fresh "
                                 "servers from pair 1 (the warm-up's), B first, pair 6, A first; A: vllm started 2x; "
                                 "B: vllm started 2x")


def test_the_summary_gives_the_exit_code_and_its_meaning() -> None:
    assert summary(ab_result(status="done")).endswith("→ exit 1 (regression)")
    assert summary(ab_result(status="interrupted")).endswith("→ exit 130 (interrupted)")


def test_terminal_and_markdown_show_the_same_run() -> None:
    result = ab_result(status="done")
    console = Console(record=True, width=200)
    render_rich(result, console)
    text = console.export_text()
    assert text.splitlines()[0] == "A = /py/a (checkout .)" and f"batchperf ab: {summary(result)}" in text
    markdown = render_ab_markdown(result)
    assert markdown.startswith(f"## batchperf ab\n\n**{summary(result)}**\n\n- A = /py/a (checkout .)\n")
    assert "c1" in markdown and "c2" in markdown and "REGRESSION" in markdown


def probed(gemm: float, interp: float) -> SessionProbes:
    return SessionProbes(MachineProbe({"gemm_gflops": gemm, "interp_mops": interp}))


def test_pairs_whose_sides_saw_different_machine_speeds_are_named_in_ab_md() -> None:
    result = ab_result(status="done")
    assert machine_text(result) == ""  # no pair probed: nothing said (an older run's pairs)
    result.pairs[0].machine = {"A": probed(100.0, 20.0), "B": probed(101.0, 20.2)}  # within the 3% margin
    result.pairs[1].machine = {"A": probed(100.0, 20.0), "B": probed(92.0, 20.0)}  # B's GEMM 8% slower
    result.pairs[2].machine = {"A": probed(100.0, 20.0)}  # one side only: not compared
    text = machine_text(result)
    assert text == ("machine speed (probed beside each side), B's against A's beyond ±3% in 1 of 2 pair(s), whose "
                    "ratios carry the machine's move too: pair 2: GEMM -8%")
    assert text in headline(result) and text in render_ab_markdown(result)
    result.pairs[1].machine = {"A": probed(100.0, 20.0), "B": probed(99.0, 20.0)}
    assert machine_text(result) == "machine speed (probed beside each side): B's within ±3% of A's in all 2 pair(s)"


def test_cells_whose_sides_waited_differently_for_a_cpu_are_named_in_ab_md() -> None:
    result = ab_result(status="done")
    assert wait_text(result) == ""  # no pair measured its wait: nothing said
    for pair, (a, b) in zip(result.pairs, [(0.02, 0.40), (0.01, 0.36), (0.03, 0.02)], strict=True):
        pair.waits = {"A": {"c1": a, "c2": 0.50}, "B": {"c1": b, "c2": 0.51}}
    text = wait_text(result)
    # c1: medians 2% and 36%, 1 - 0.64 / 0.98 = 35% less CPU for B; c2: 2% less, within the 3% margin
    assert text.endswith("beyond ±3% in 1 of 2 cell(s), whose ratios carry the machine's load too: "
                         "c1: A 2%, B 36% (-35% CPU)"), text
    assert text in headline(result) and text in render_ab_markdown(result)
    pair = Pair(9, ("A", "B"), {label: SideRun(label, 0, 1.0, None, Path("log")) for label in "AB"}, 0.5,
                waits={"A": {"c1": 0.02}, "B": {}})
    assert pair.to_dict()["A"]["cpu_wait_share"] == {"c1": 0.02} and "cpu_wait_share" not in pair.to_dict()["B"]
    result.pairs[0].waits = {"A": {"c1": 0.02}}  # one side only: that pair is not counted
    for pair in result.pairs[1:]:
        pair.waits = {"A": {"c1": 0.10}, "B": {"c1": 0.11}}
    assert wait_text(result).endswith("B's within ±3% of A's CPU in all 1 cell(s)")
