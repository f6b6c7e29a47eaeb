"""A chain's alpha is the chain's: with no change anywhere, the chance that any of its runs calls one is at most alpha.

Checked by simulation, as ab's own alpha is (tests/ab/test_stats_signed_rank.py): null pairs (symmetric noise) for
every run, cell and deciding metric, judged look by look by ab's own code (the chain's per-run alpha, ab's `prepare`
splitting it over cells x deciding metrics and making the judge, `judge_cell` at each look), no process started."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from ab_fakes import CELLS, FakeEnvs
from paths import REPO

from batchperf.ab.cell import CellState, PairSeries
from batchperf.ab.env import Environment
from batchperf.ab.judging import judge_cell
from batchperf.ab.run import prepare
from batchperf.ab.settings import Settings
from batchperf.measure.catalogue import by_name
from batchperf.regress.verdict import Verdict
from batchperf.releases.chain import ChainResult, plan, settings_identity

CALLED = (Verdict.REGRESSION, Verdict.IMPROVEMENT)
Law = Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]
LAWS: dict[str, Law] = {
    "normal": lambda rng, shape: rng.normal(0, 0.03, shape),
    # mostly small noise, sometimes a process a neighbour slowed by 30%: symmetric about 0 still
    "two-point outliers": lambda rng, shape: rng.normal(0, 0.01, shape) + rng.choice([-0.3, 0.3], shape) * (
        rng.random(shape) < 0.1),
}


def chain_judge(releases: int, cells: int, metrics: tuple[str, ...], test: str, max_pairs: int, split: bool,
                tmp_path: Path):  # noqa: ANN201
    """(runs, the judge each run's ab makes): the chain's per-run alpha (``split``; else each run at the whole
    alpha, as chains were judged before), through ab's own preparation of a run on ``cells`` cells."""
    envs = [Environment(str(i), Path(f"/py/{i}"), dir=REPO) for i in range(releases)]
    labels = [str(i) for i in range(releases)]
    base = Settings(envs[0], envs[-1], ("-m", "cpu"), tmp_path / "chain", metrics=metrics, test=test,
                    max_pairs=max_pairs, max_minutes=None, margin=0.0)
    chain = ChainResult(envs, labels, plan(labels), settings_identity(base))
    alpha = chain.step_alpha if split else base.alpha
    fakes = FakeEnvs(cells=CELLS[:cells])
    prepared = prepare(Settings(envs[0], envs[1], ("-m", "cpu"), tmp_path / "ab", metrics=metrics, test=test,
                                max_pairs=max_pairs, max_minutes=None, margin=0.0, alpha=alpha),
                       fakes.probe, fakes.collect)
    assert len(prepared.cells) == cells
    return len(chain.steps), prepared.sequential_test


def calls(draws: np.ndarray, metrics: tuple[str, ...], judge) -> bool:  # noqa: ANN001
    """One cell of one run: its metrics' null log-ratios (metrics x pairs) judged after every pair until the cell
    settles, as ab does; True when it calls a change. A margin of 0 never settles as no change: every look is taken
    (the worst case). Looks before ``judge.needs`` cannot decide (SequentialTest.needs), so they are not judged."""
    cell = CellState("cell", "node")
    cell.metrics = {m: PairSeries(m, by_name(m).direction, True, 0.0) for m in metrics}
    for n in range(1, draws.shape[1] + 1):
        for m, series in zip(metrics, cell.metrics.values()):
            series.a.append(1.0)
            series.b.append(math.exp(draws[metrics.index(m), n - 1]))
        if n >= judge.needs:
            judge_cell(cell, judge, n)
        if cell.settled:
            break
    return cell.verdict in CALLED


def false_calls(runs: int, cells: int, metrics: tuple[str, ...], judge, max_pairs: int, law: Law,  # noqa: ANN001
                sims: int, seed: int) -> tuple[float, float]:
    """(share of null chains where some run called a change, share where a call also survived its confirmation: a
    fresh run of the same pair that calls the same change)."""
    rng = np.random.default_rng(seed)
    any_call = confirmed = 0
    for _ in range(sims):
        draws = law(rng, (runs, cells, len(metrics), max_pairs))
        hits = [calls(draws[r, c], metrics, judge) for r in range(runs) for c in range(cells)]
        any_call += any(hits)
        # a confirmation is drawn only where a call was made; under the null its sign agrees half the time at most
        confirmed += any(hit and calls(law(rng, (len(metrics), max_pairs)), metrics, judge) for hit in hits)
    return any_call / sims, confirmed / sims


def test_a_chain_of_t_judged_runs_holds_its_alpha_over_every_run_cell_and_metric(tmp_path: Path) -> None:
    """Four releases (three steps and first -> last), two deciding metrics, twelve looks a run, normal pairs (where
    the sequential t is exact; it is conservative under outliers, docs/ab.md): split over the runs, the chain's
    false calls stay within alpha; each run at the whole alpha (as chains were judged before) they exceed it."""
    law, alpha, sims, metrics = "normal", 0.05, 800, ("output_throughput", "p99_ttft_ms")
    slack = 3 * math.sqrt(alpha * (1 - alpha) / sims)  # Monte Carlo error of the check itself
    runs, judge = chain_judge(4, 1, metrics, "t", 12, True, tmp_path)
    assert runs == 4
    rate, confirmed = false_calls(runs, 1, metrics, judge, 12, LAWS[law], sims, seed=5)
    assert rate <= alpha + slack, f"{law}: {rate:.3f} of null chains called a change"
    assert confirmed <= rate / 4 + slack, f"{law}: {confirmed:.3f} of null chains confirmed a call"
    _, whole = chain_judge(4, 1, metrics, "t", 12, False, tmp_path)
    naive, _ = false_calls(runs, 1, metrics, whole, 12, LAWS[law], sims, seed=6)
    # seen: 0.016 split, 0.108 whole (800 sims); the check fails where the split is left out
    assert naive > alpha + slack, f"{law}: each run at the whole alpha called only {naive:.3f}"


@pytest.mark.parametrize("law", sorted(LAWS))
def test_a_chain_of_signed_rank_judged_runs_holds_its_alpha(law: str, tmp_path: Path) -> None:
    """ab's default test, honest for any symmetric noise, on the budget the chain's split needs (three releases:
    three runs at alpha / 3, two cells: 8 pairs)."""
    alpha, sims, metrics, max_pairs = 0.05, 300, ("output_throughput",), 8
    slack = 3 * math.sqrt(alpha * (1 - alpha) / sims)
    runs, judge = chain_judge(3, 2, metrics, "signed-rank", max_pairs, True, tmp_path)
    assert runs == 3 and judge.needs is not None and judge.needs <= max_pairs
    rate, confirmed = false_calls(runs, 2, metrics, judge, max_pairs, LAWS[law], sims, seed=7)
    assert rate <= alpha + slack, f"{law}: {rate:.3f} of null chains called a change"
    assert confirmed <= rate


@pytest.mark.parametrize("law", sorted(LAWS))
def test_the_chains_default_t_holds_its_alpha_on_six_releases_at_8_pairs(law: str, tmp_path: Path) -> None:
    """`batchperf chain`'s own default (the sequential t, cli.chain.TEST) on the budget a chain of six releases
    gives a run: six runs at alpha / 6, 8 pairs, looks from the 5th (where signed-rank could only look at the 8th)."""
    from batchperf.cli.chain import TEST

    alpha, sims, metrics, max_pairs = 0.05, 400, ("output_throughput",), 8
    slack = 3 * math.sqrt(alpha * (1 - alpha) / sims)
    runs, judge = chain_judge(6, 1, metrics, TEST, max_pairs, True, tmp_path)
    assert runs == 6 and judge.test == "t" and judge.needs == 5
    rate, confirmed = false_calls(runs, 1, metrics, judge, max_pairs, LAWS[law], sims, seed=8)
    assert rate <= alpha + slack, f"{law}: {rate:.3f} of null chains called a change"
    assert confirmed <= rate
