"""``batchperf ab``: the same cells in two environments, interleaved in fresh processes, until the answer is clear.

Pair *i* runs one pytest process of A and one of B, in the order A B, B A, A B, … (so a drift of the
machine's speed within a pair cancels over pairs), each writing an ordinary results file. A warm-up pair runs
first and is discarded, and the rounds per process are chosen from its costs when not given
(:mod:`batchperf.ab.warmup`). Per cell
and per metric, each pair gives a log-ratio ln(B/A), round-paired (the median of its two processes' i-th rounds'
ratios, :func:`batchperf.ab.cell.round_paired`; the ratio of their medians where the rounds do not pair); after
every pair
:mod:`batchperf.ab.stats.signed_rank` turns them into an estimate, an interval and a call:

- a *deciding* metric (``--metrics``, default output throughput alone) is judged at the
  per-look level that keeps the whole run's false-alarm rate at ``alpha`` (split over cells × deciding
  metrics, and honest when it looks after every pair); the exact metrics (KV bytes) are deciding too,
  and compared value for value where each side repeats its own value (:func:`exact_call`);
- every other gated metric (the catalogue's gated entries) gets the same estimate and interval, reported, not
  deciding.

A cell's verdict (:mod:`batchperf.regress.verdict`, the gate's vocabulary) is *regression* as soon as one
deciding metric regresses, *no change* / *improvement* once every deciding metric is decided, else
*inconclusive*; a cell that fails in an environment is *failed*, one whose environments ran different cells
is *not judged*. A settled cell keeps its
verdict and is left out of later pairs (``--deselect``); the run stops when every cell is settled or
failed, or the budget (pairs, minutes) is spent. A cell that fails, errors or skips in one environment
is reported as such, never judged. Ctrl-C keeps every finished pair and reports them.
"""

from __future__ import annotations

import math
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from batchperf.ab import outdir
from batchperf.ab.cell import CellState
from batchperf.ab.designs import duet_cores, run_cells, run_resident
from batchperf.ab.env import Environment, EnvironmentProblem, Probe, SideRun, collect, probe
from batchperf.ab.kept import (
    SIDES,
    ServerStart,
    kept_folder,
    kept_order,
    pair_prices,
    pairs_within,
    restart_due,
    retire,
    warmup_order,
    with_kept_servers,
)
from batchperf.ab.looks import looser, pair_seconds, plan_looks
from batchperf.ab.pairs import absorb, check_identity, measuring, order_of, read_pair
from batchperf.ab.result import AbResult, Ended, Pair
from batchperf.ab.settings import DEFAULT_ROUNDS, BudgetTooSmall, Settings, UsageProblem
from batchperf.ab.stats import fewest_max_pairs, make_test, signed_rank
from batchperf.ab.warmup import WARMUP_ROUNDS, RoundsChoice, Warmup, choose_rounds, costs
from batchperf.launch.child import exit_code_of, stop_signals
from batchperf.launch.kept_server import stop_kept
from batchperf.regress.fingerprint import identity_diff
from batchperf.regress.machine import WAIT_SHARE, session_probes
from batchperf.results.io import atomic_write_text
from batchperf.results.record import ResultsError

SideRunner = Callable[..., SideRun]  # (environment, pytest arguments, stem, timeout_s=) like run_cells
Prober = Callable[[Environment], Probe]
Collector = Callable[[Environment, Sequence[str]], dict[str, str]]
Progress = Callable[[str], None]


def prepare(settings: Settings, prober: Prober = probe, collector: Collector = collect) -> AbResult:
    """Probe both environments, check they can be compared, collect the cells and find the per-look level."""
    try:
        probes = {"A": prober(settings.a), "B": prober(settings.b)}
    except EnvironmentProblem as exc:
        raise UsageProblem(str(exc)) from None
    ida, idb = (probes[k].fingerprint.identity for k in ("A", "B"))
    if diffs := identity_diff(ida.to_dict(), idb.to_dict()):
        raise UsageProblem(f"A and B have different hardware identities ({'; '.join(diffs)}); an A/B comparison "
                           "needs the same devices and thread count: set the same CUDA_VISIBLE_DEVICES, "
                           "OMP_NUM_THREADS and CPU affinity for both")
    try:
        found = {"A": collector(settings.a, settings.pytest_args), "B": collector(settings.b, settings.pytest_args)}
    except EnvironmentProblem as exc:
        raise UsageProblem(str(exc)) from None
    shared = [cid for cid in found["A"] if cid in found["B"]]
    if not shared:
        raise UsageProblem(f"the pytest arguments {' '.join(settings.pytest_args) or '(none)'} select no cell that "
                           f"both environments have (A: {len(found['A'])}, B: {len(found['B'])}); e.g. "
                           "-- -m cpu -k 'hf-static and bs8 and p512 and c16'")
    design = resolve_design(settings.design, probes)
    if design == "duet":
        try:
            duet_cores(("A", "B"))
        except EnvironmentProblem as exc:
            raise UsageProblem(str(exc)) from None
    deciding = len(settings.metrics)  # the exact metrics decide too, but by equality: no error to share
    family = family_alpha(settings, len(shared))
    needed = fewest_max_pairs(settings.test, family)
    if settings.max_pairs < needed:
        fix = (f"give --max-pairs {needed} or more" if needed <= signed_rank.MAX_PAIRS
               else "no --max-pairs allowed is enough")
        raise BudgetTooSmall(f"--max-pairs {settings.max_pairs}: a verdict on {len(shared)} cell(s) x {deciding} "
                             f"deciding metric(s) at --alpha {settings.alpha} needs at least {needed} pairs ({fix}; "
                             "or fewer cells, fewer --metrics, or a larger --alpha)")
    test = make_test(settings.test, settings.max_pairs, family)
    cells = {cid: CellState(cid, found["A"][cid]) for cid in shared}
    only = {label: sorted(set(found[label]) - set(found[other]))
            for label, other in (("A", "B"), ("B", "A")) if set(found[label]) - set(found[other])}
    return AbResult(settings, probes, test, f"{test.method}; alpha {settings.alpha} over {len(shared)} cell(s) x "
                    f"{deciding} deciding metric(s) = {family:.4g} each", cells, only_in=only, design=design)


def family_alpha(settings: Settings, cells: int) -> float:
    """The false-alarm rate of each cell's each deciding metric: ``alpha`` split over them (Bonferroni)."""
    return settings.alpha / (cells * len(settings.metrics))


def resolve_design(asked: str, probes: Mapping[str, Probe]) -> str:
    """``auto``: ``resident`` (both processes at once, in turns: the steadier pairs per minute, docs/ab.md "Designs")
    unless an environment sees a GPU, where two processes at once would each hold a model and its KV pool in the
    card's memory: ``sequential`` there. Any other design as asked."""
    if asked != "auto":
        return asked
    return "sequential" if any(p.fingerprint.identity.gpus for p in probes.values()) else "resident"


def run_ab(settings: Settings, runner: SideRunner = run_cells, prober: Prober = probe, collector: Collector = collect,
           progress: Progress = lambda line: None, clock: Callable[[], float] = time.monotonic) -> AbResult:
    """The whole A/B run; :class:`UsageProblem` before anything is measured when it cannot give an answer.

    The output folder is claimed first (:mod:`batchperf.ab.outdir`: new or empty, locked) and, when the run stops
    before measuring anything, removed again. Inside, SIGINT and SIGTERM stop the running process group and end
    the run as interrupted; any other error after the first pair started ends it as failed (exit 4), and ``ab.json``
    always ends with the final state."""
    start = clock()
    try:
        folder = outdir.claim(settings.out)
    except outdir.OutProblem as exc:
        raise UsageProblem(str(exc)) from None
    with folder, stop_signals():
        result = prepare(settings, prober, collector)
        needs = result.sequential_test.needs
        progress(f"{result.sequential_test.describe()}; {result.level_method}; a verdict needs at least "
                 f"{needs} pairs; {len(result.cells)} cell(s)")
        try:
            ended = measure_pairs(result, runner, progress, clock, start)
        except KeyboardInterrupt as exc:
            ended = interrupted(result, exit_code_of(exc) - 128)
        except ResultsError as exc:
            ended = Ended("failed", f"a results file could not be read: {exc}")
        except Exception as exc:  # noqa: BLE001 - whatever it was, the run ends as failed and says why
            ended = Ended("failed", f"unexpected error: {type(exc).__name__}: {exc}")
        finally:
            if settings.keep_servers:  # ended however the run ended; a SIGKILL of ab ends them too (their guards)
                result.kept_servers = {label: stop_kept(kept_folder(settings.out, label)) for label in SIDES}
        finish(result, ended)
        write_ab_json(result, clock() - start)
    return result


def finish(result: AbResult, ended: Ended) -> None:
    """The one place the run's end is applied: how the stage that ended it said it ended."""
    result.status = ended.status
    result.reason = ended.reason
    result.minutes_needed = ended.minutes_needed
    if ended.stop_signal is not None:
        result.stop_signal = ended.stop_signal


def interrupted(result: AbResult, signum: int) -> Ended:
    """How a stop signal (SIGINT, SIGTERM) during the warm-up or a pair ends the run: that pair is discarded."""
    during = "the warm-up" if result.settings.warmup and result.warmup is None else f"pair {len(result.pairs) + 1}"
    return Ended("interrupted", f"interrupted ({signal.Signals(signum).name}) during {during}; that pair is discarded, "
                 f"the {len(result.pairs)} finished pair(s) are reported", stop_signal=signum)


def measure_pairs(result: AbResult, runner: SideRunner, progress: Progress, clock: Callable[[], float],
                  start: float) -> Ended:
    """The warm-up, then pairs until every cell is settled or failed, a budget is spent, or an environment fails;
    returns how it ended."""
    settings = result.settings
    if given := settings.given_rounds:
        result.rounds = RoundsChoice(given, given, "given")
    if (ended := warm_up(result, runner, progress)) is not None:
        return ended
    pairs_from = clock() - start  # the pairs' own seconds (judging and writing included) are counted from here
    while measuring(result):
        index = len(result.pairs) + 1
        elapsed = clock() - start
        plan_for_budget(result, elapsed, progress, (elapsed - pairs_from) / len(result.pairs) if result.pairs else None)
        if stop := budget_spent(result, index, elapsed, elapsed - pairs_from):
            return stop
        rounds = result.rounds.chosen if result.rounds else DEFAULT_ROUNDS
        stems = {label: settings.out.resolve() / f"pair-{index:03d}-{label}" for label in ("A", "B")}
        if settings.keep_servers:
            restart_servers(result, index, progress)
        order = pair_order(result, index)
        runs = run_pair(result, runner, rounds, stems, order)
        pair = Pair(index, order, runs, _load())
        result.pairs.append(pair)
        if crashed := [r for r in runs.values() if r.crashed]:
            return Ended("failed", "; ".join(crash_reason(r, f"pair {index}", result, index - 1) for r in crashed))
        files = read_pair(runs)
        pair.machine = {label: probes for label, file in files.items() if (probes := session_probes(file))}
        pair.waits = {label: {r.id: w for r in file.records if (w := r.value(WAIT_SHARE)) is not None}
                      for label, file in files.items()}
        if problem := check_identity(files, index):
            return Ended("failed", problem)
        absorb(result, pair, files)
        if result.rounds is None:  # no warm-up measured the costs: the first pair does, for the pairs after it
            source = f"first pair (itself {rounds} rounds)"
            result.rounds = choose_rounds(runs, files, result.design, source) or RoundsChoice(
                DEFAULT_ROUNDS, None, "the first pair's results hold no round durations: the default")
            progress(f"rounds per process from pair 2 on: {result.rounds.chosen} ({result.rounds.why})")
        progress(progress_line(result, pair, clock() - start))
        write_ab_json(result, clock() - start)
    return Ended("done")


def warm_up(result: AbResult, runner: SideRunner, progress: Progress) -> Ended | None:
    """The warm-up pair before pair 1 (discarded), and the rounds chosen from it when none were given; how the run
    ended when an environment failed in it, None when the pairs follow."""
    settings = result.settings
    if not settings.warmup:
        result.warmup = Warmup(False, "--no-warmup")
        return None
    # a few rounds: the warm-up is for a fresh environment's one-time costs (compiling, caches, a kept server's start),
    # which its first rounds pay; given rounds beyond those would only lengthen it
    rounds = min(result.rounds.chosen, WARMUP_ROUNDS) if result.rounds else WARMUP_ROUNDS
    stems = {label: settings.out.resolve() / f"warmup-{label}" for label in ("A", "B")}
    progress(f"warm-up: one process of A and of B, {rounds} round(s), discarded")
    order = order_of(1)
    if settings.keep_servers:  # it starts the kept servers: which side's starts first is drawn
        order = warmup_order()
        result.server_starts.append(ServerStart(1, order[0], in_warmup=True))
    runs = run_pair(result, runner, rounds, stems, order)
    result.warmup = Warmup(True, f"one process of A and of B ({result.design}), {rounds} round(s) each", rounds,
                           {label: run.seconds for label, run in runs.items()})
    if crashed := [r for r in runs.values() if r.crashed]:
        return Ended("failed", "; ".join(crash_reason(r, "the warm-up", result, 0) for r in crashed))
    try:
        files = read_pair(runs)
    except ResultsError:  # nothing of the warm-up is judged: a file it left unreadable only hides its costs
        files = {}
    if result.rounds is None:
        result.rounds = choose_rounds(runs, files, result.design, "warm-up") or RoundsChoice(
            DEFAULT_ROUNDS, None, "the warm-up's results hold no round durations: the default")
    elif result.rounds.round_s is None and (measured := costs(runs, files, result.design)) is not None:
        result.rounds = replace(result.rounds, round_s=measured[0], startup_s=measured[1])  # for plan_for_budget
    progress(f"{result.warmup.describe()}; rounds per process: {result.rounds.chosen} ({result.rounds.why})")
    return None


def plan_for_budget(result: AbResult, elapsed_s: float, progress: Progress, pair_s: float | None = None) -> None:
    """Once a pair's costs are known and before any look could decide, plan the test's looks for the pairs the
    minutes left hold, when fewer than ``--max-pairs`` (:mod:`batchperf.ab.looks`): the looks the minutes would cut
    off no longer make each look stricter. Planned from the warm-up's costs; planned (again), for fewer looks, when
    the pairs measured so far (``pair_s``, seconds a pair with its judging) ran slower than the plan assumed; a run
    the warm-up gave no plan is planned from its measured pairs, slower or faster than the warm-up said (a kept
    server's restart pair; a kept server's warm-up, which prices its pairs with a start-up they do not pay)."""
    s, chosen = result.settings, result.rounds
    if chosen is None or chosen.round_s is None or chosen.startup_s is None:
        return
    old, predicted = result.looks, pair_seconds(chosen.round_s, chosen.startup_s, chosen.chosen, result.design)
    # measured pairs price a pair from then on: a run without a plan takes them whether slower or faster than the
    # warm-up said (a kept server's warm-up, whose start-up the kept pairs do not pay, prices them too high, and
    # the budget rule, which reads the measured pairs, then stopped a run no plan was made for); a planned run
    # re-plans only when they run slower than its plan
    measured = pair_s is not None and (old is None or pair_s > old.pair_s)
    if old is not None and not measured:
        return
    if not measured:  # the warm-up's plan, made before any look could decide
        if len(result.pairs) >= (result.sequential_test.needs or 0):
            return
        pair_s = predicted
    family = family_alpha(s, len(result.cells))
    plan = plan_looks(s.max_pairs, s.max_minutes, elapsed_s, len(result.pairs), pair_s,
                      fewest_max_pairs(s.test, family), measured=measured)
    if plan is None or (old is not None and plan.pairs >= old.pairs):
        return
    test = make_test(s.test, plan.pairs, family)
    if not measured and len(result.pairs) >= (test.needs or 0):
        return
    if measured and not looser(test, result.sequential_test):  # only a plan no look of which is stricter
        return
    result.looks, result.sequential_test = plan, test
    base = result.level_method.split("; looks planned for ")[0]
    result.level_method = f"{base}; looks planned for {plan.pairs} pairs, not {plan.asked}: {plan.why}"
    progress(f"looks planned for {plan.pairs} pairs ({plan.why}): {test.describe()}; a verdict needs at least "
             f"{test.needs} pairs")


def pair_order(result: AbResult, index: int) -> tuple[str, str]:
    """The order pair ``index`` runs its sides in: A B, B A, … (:func:`batchperf.ab.pairs.order_of`); with kept
    servers, following the sets of pairs their servers serve (:func:`batchperf.ab.kept.kept_order`)."""
    if not result.settings.keep_servers or not result.server_starts:
        return order_of(index)
    return kept_order(index, result.server_starts[0].first, result.settings.restart_servers_every)


def restart_servers(result: AbResult, index: int, progress: Progress) -> None:
    """``--keep-servers``: before pair ``index``, retire both sides' kept servers at the first pair of a set
    (:func:`batchperf.ab.kept.restart_due`), so that the pair's processes start new ones in their first, discarded,
    round; recorded in ``result.server_starts``. Without a warm-up, pair 1's processes start the first set's, in a
    drawn order."""
    if not result.server_starts:
        result.server_starts.append(ServerStart(index, warmup_order()[0]))
        return
    if not restart_due(index, result.settings.restart_servers_every):
        return
    last, first = result.server_starts[-1], pair_order(result, index)[0]
    retire(result.settings.out)
    progress(f"kept servers: retired after {index - last.from_pair} pair(s); pair {index}'s processes start "
             f"fresh ones, {first} first")
    result.server_starts.append(ServerStart(index, first))


def run_pair(result: AbResult, runner: SideRunner, rounds: int, stems: Mapping[str, Path],
             order: tuple[str, str]) -> dict[str, SideRun]:
    """One process of each environment on the cells still measured, in the run's design."""
    settings = result.settings
    envs = side_envs(settings)
    deselect = [f"--deselect={c.nodeid}" for c in result.cells.values() if c not in measuring(result)]
    deselect += [f"--deselect={nodeid}" for ids in result.only_in.values() for nodeid in ids]
    args = [*settings.run_args(rounds), *deselect]
    if result.design in ("resident", "duet"):  # both processes at once (docs/ab.md, "Designs")
        return run_resident(envs, args, stems, order, list(result.cells), settings.process_timeout_s,
                            duet=result.design == "duet")
    runs = {}
    for label in order:
        runs[label] = runner(envs[label], args, stems[label], timeout_s=settings.process_timeout_s)
        if runs[label].crashed:  # the pair is lost anyway: don't spend the other side's process
            break
    return runs


def side_envs(settings: Settings) -> dict[str, Environment]:
    """A and B as their processes run; with ``--keep-servers``, told where their kept servers are and whose they
    are (:func:`batchperf.ab.kept.with_kept_servers`)."""
    envs = {"A": settings.a, "B": settings.b}
    return with_kept_servers(envs, settings.out) if settings.keep_servers else envs


def crash_reason(run: SideRun, when: str, result: AbResult, kept: int) -> str:
    """Which side, when (which pair), which cell, and how its process ended; ``kept``: the finished pairs."""
    settings = result.settings
    cell = (f"at cell {run.at}" if run.at else
            "running " + (", ".join(c.id for c in measuring(result)) or "its cells"))
    if run.timed_out:
        return (f"environment {run.label}'s process in {when} ({cell}) ran past {settings.process_timeout_s / 60:g} "
                f"min (--process-minutes, default --max-minutes) and was stopped with its process group: "
                f"{run.log_tail()[-1500:]}")
    return (f"environment {run.label} failed to run in {when} ({how_it_ended(run.returncode)}), {cell}; the "
            f"{kept} finished pair(s) are kept: {run.log_tail()[-1500:]}")


def how_it_ended(returncode: int) -> str:
    """A child's exit status in words: the signal that killed it (a negative code, or 128 + N from the group guard),
    or pytest's exit code."""
    signum = -returncode if returncode < 0 else returncode - 128 if returncode > 128 else 0
    try:
        name = signal.Signals(signum).name if signum else ""
    except ValueError:
        name = ""
    if name:
        oom = ": the kernel's out-of-memory killer sends this too" if name == "SIGKILL" else ""
        return f"killed by {name}, exit {returncode}{oom}"
    return f"pytest exit {returncode}" + (", no results file" if returncode in (0, 1, 5) else "")


def budget_spent(result: AbResult, index: int, elapsed_s: float, pairs_s: float) -> Ended | None:
    """Why no further pair runs (status budget), or None. A pair's cost is the wall clock the pairs so far took
    (``pairs_s``, from the first pair's start), not its processes' seconds summed: the resident and duet designs run
    the two at once, and a sum there doubled the estimate and ended a run a pair early. When the minutes left cannot
    reach the pairs a verdict needs, the run stops at once, naming the budget that would (``minutes_needed``; seen:
    a chain whose 10-minute steps fit 3 of the 6 pairs a verdict needed, an hour measured for nothing)."""
    s = result.settings
    if index > result.max_pairs:
        return Ended("budget", f"--max-pairs {s.max_pairs} spent" if result.looks is None else
                     f"the {result.max_pairs} pairs the looks were planned for spent ({result.looks.why})")
    if s.max_minutes is not None and result.pairs:
        per_pair, left = pairs_s / len(result.pairs), max(s.max_minutes * 60 - elapsed_s, 0)
        if s.keep_servers:  # a restart's pair costs about two kept ones: each pair ahead at its own price
            seconds = {p.index: max((r.seconds for r in p.runs.values()), default=0.0) for p in result.pairs}
            price = pair_prices(seconds, result.server_starts, s.restart_servers_every, per_pair)
            fit = len(result.pairs) + pairs_within(left, price, index, result.max_pairs - len(result.pairs))
            next_s = price(index)
        else:
            fit, next_s = len(result.pairs) + int(left // per_pair), per_pair
        if fit < (needs := result.sequential_test.needs):  # the pairs to come could not give any verdict
            enough = math.ceil((elapsed_s - pairs_s + needs * per_pair) / 60)
            return Ended("budget", f"--max-minutes {s.max_minutes:g}: a pair takes about {per_pair / 60:.1f} min, so "
                         f"{fit} pair(s) fit and a verdict needs {needs}; stopped rather than measure pairs that "
                         f"cannot decide. Give --max-minutes {enough} or more (or fewer --rounds)",
                         minutes_needed=enough)
        if next_s > left:
            return Ended("budget", f"--max-minutes {s.max_minutes:g}: {elapsed_s / 60:.1f} min spent, and a pair "
                         f"takes about {next_s / 60:.1f} min")
    elif s.max_minutes is not None and elapsed_s >= s.max_minutes * 60:
        return Ended("budget", f"--max-minutes {s.max_minutes:g} spent before the first pair")
    return None


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def progress_line(result: AbResult, pair: Pair, elapsed_s: float) -> str:
    sides = " ".join(f"{label} {pair.runs[label].seconds:.0f}s" for label in pair.order)
    parts = []
    for cell in result.cells.values():
        head = next((m for m in cell.metrics.values() if m.deciding and m.interval is not None), None)
        if head is None or head.interval is None:
            parts.append(f"{cell.id}: {cell.verdict.value}")
            continue
        est, low, high = (signed_rank.relative(x) for x in (head.interval.estimate, head.interval.low, head.interval.high))
        parts.append(f"{cell.id}: {head.metric} {est:+.1%} [{low:+.1%}, {high:+.1%}] {cell.verdict.value}")
    load = f" load {pair.load_avg_1m}" if pair.load_avg_1m is not None else ""
    return f"[pair {pair.index}/{result.max_pairs}] {sides}{load} {elapsed_s / 60:.1f} min | " + " | ".join(parts)


def write_ab_json(result: AbResult, elapsed_s: float) -> Path:
    """``OUT/ab.json``, rewritten atomically after every pair (an interrupted run keeps what it measured)."""
    import json

    result.elapsed_s = elapsed_s
    path = result.settings.out / "ab.json"
    atomic_write_text(path, json.dumps(result.to_dict(), indent=1) + "\n")
    return path
