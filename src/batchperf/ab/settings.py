"""The settings of one ``batchperf ab`` run, checked when they are made (:class:`UsageProblem`: exit 3)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from batchperf.ab.env import Environment
from batchperf.ab.stats import DEFAULT_TEST, TESTS, signed_rank
from batchperf.measure.catalogue import AB_DEFAULT, AB_PER_TENANT, GATED, Direction

DESIGNS = ("auto", "sequential", "resident", "duet")  # docs/ab.md, "Designs"
# measured rounds per process of a first pair when --rounds is not given and no warm-up measured the costs
# (batchperf.ab.warmup chooses from pair 2 on)
DEFAULT_ROUNDS = 5
# --keep-servers: fresh servers every this many pairs (batchperf.ab.kept). docs/ab.md, "Servers kept across pairs",
# argues it: a kept server's own level (~0.004 sd of ln) against a pair's sd (0.016 at 30 rounds): kept for 3
# pairs, the server levels widen the estimate's variance by at most a quarter more than the interval assumes, and
# a verdict of 7-9 pairs samples 3 server levels a side for one start per side every 3 pairs
RESTART_SERVERS_EVERY = 3


def per_tenant_name(metric: str) -> bool:
    """``p99_ttft_ms[interactive]``: one tenant's series of a per-tenant metric ab follows (AB_PER_TENANT)."""
    name, sep, rest = metric.partition("[")
    return bool(sep) and name in AB_PER_TENANT and rest.endswith("]") and len(rest) > 1


class UsageProblem(ValueError):
    """Settings or environments that cannot give an answer; nothing was measured (exit 3)."""


class BudgetTooSmall(UsageProblem):
    """``--max-pairs`` below what a verdict on these cells needs (the same for every environment: bisect stops)."""


@dataclass(frozen=True, slots=True)
class Settings:
    a: Environment
    b: Environment
    pytest_args: tuple[str, ...]
    out: Path
    margin: float = 0.03
    margins: Mapping[str, float] = field(default_factory=dict)  # per-metric overrides
    metrics: tuple[str, ...] = AB_DEFAULT  # deciding, statistically judged
    alpha: float = 0.05  # two-sided, family-wise over the run's cells × deciding metrics
    max_pairs: int = 30
    max_minutes: float | None = 60.0
    process_minutes: float | None = None  # a process longer than this hangs: stopped, the run fails (None: max_minutes)
    rounds: int | None = None  # None: chosen from the warm-up's costs (batchperf.ab.warmup), unless the pytest args say
    warmup: bool = True  # a warm-up pair before pair 1, discarded (--no-warmup: none)
    test: str = DEFAULT_TEST  # the interval of each look: "t" (sequential t) or "signed-rank"
    design: str = "auto"  # how a pair's two processes run (DESIGNS); auto: resident, sequential where a GPU is seen
    keep_servers: bool = False  # each side's server started once and kept across its pairs (launch.kept_server)
    restart_servers_every: int = RESTART_SERVERS_EVERY  # --keep-servers: fresh servers every N pairs (ab.kept)
    command: str = ""  # the command line, recorded so the run can be repeated

    def __post_init__(self) -> None:
        problems = []
        if self.max_pairs < 1:
            problems.append(f"--max-pairs {self.max_pairs}: a budget of zero pairs measures nothing; give 1 or more "
                            "(a verdict needs about 10 at the default alpha)")
        elif self.max_pairs > signed_rank.MAX_PAIRS:
            problems.append(f"--max-pairs {self.max_pairs}: at most {signed_rank.MAX_PAIRS} (a run that needs more pairs "
                            "has an effect smaller than this machine can show; widen --margin or use fewer cells)")
        if self.max_minutes is not None and not self.max_minutes > 0:
            problems.append(f"--max-minutes {self.max_minutes}: a budget of zero minutes measures nothing")
        if self.process_minutes is not None and not self.process_minutes > 0:
            problems.append(f"--process-minutes {self.process_minutes}: must be more than 0")
        if not 0 < self.alpha < 1:
            problems.append(f"--alpha {self.alpha}: must be between 0 and 1")
        for name, value in {"": self.margin, **self.margins}.items():
            if not 0 <= value < 1:
                problems.append(f"--margin {name + '=' if name else ''}{value}: must be a fraction in [0, 1)")
        if self.test not in TESTS:
            problems.append(f"--test {self.test}: unknown; give one of {', '.join(TESTS)}")
        if self.design not in DESIGNS:
            problems.append(f"--design {self.design}: unknown; give one of {', '.join(DESIGNS)}")
        every = self.restart_servers_every
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            problems.append(f"--restart-servers-every {every!r}: must be a whole number of pairs >= 1 (1: fresh "
                            f"servers every pair; --max-pairs or more: once a run; default {RESTART_SERVERS_EVERY})")
        if self.rounds is not None and self.rounds < 1:
            problems.append(f"--rounds {self.rounds}: must be >= 1")
        known = {r.name for r in GATED if r.direction is not Direction.EXACT}
        if unknown := [m for m in (*self.metrics, *self.margins) if m not in known and not per_tenant_name(m)]:
            problems.append(f"unknown metric(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}, and in a "
                            f"cell with tenants {', '.join(f'{n}[TENANT]' for n in AB_PER_TENANT)}")
        if not self.metrics:
            problems.append("--metrics names no metric")
        if problems:
            raise UsageProblem("; ".join(problems))

    @property
    def process_timeout_s(self) -> float | None:
        minutes = self.process_minutes if self.process_minutes is not None else self.max_minutes
        return None if minutes is None else minutes * 60

    def margin_of(self, metric: str) -> float:
        return self.margins.get(metric, self.margin)

    @property
    def given_rounds(self) -> int | None:
        """The rounds the user gave: a --batchperf-rounds in the pytest arguments (it wins), else --rounds."""
        args = list(self.pytest_args)
        for i, arg in enumerate(args):
            name, sep, value = arg.partition("=")
            if name == "--batchperf-rounds":
                text = value if sep else (args[i + 1] if i + 1 < len(args) else "")
                return int(text) if text.isdigit() else self.rounds
        return self.rounds

    def run_args(self, rounds: int | None) -> list[str]:
        """The pytest arguments of a process measuring ``rounds`` rounds (None: as the pytest arguments say)."""
        given = any(a.startswith("--batchperf-rounds") for a in self.pytest_args)
        extra = [] if rounds is None or given else [f"--batchperf-rounds={rounds}"]
        return [*self.pytest_args, *extra, "--batchperf-progress=off"]
