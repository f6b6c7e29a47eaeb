"""Fakes for `batchperf ab` and `bisect` tests: environments whose processes write results files made from a real
CPU-tier results file, with a chosen speed and seeded per-process noise, and junit outcomes."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import paths

from batchperf.ab.env import Environment, Outcome, Probe, SideRun, cell_key
from batchperf.regress.fingerprint import Fingerprint

REAL = paths.DATA / "results_cpu_small.json"
DATA = json.loads(REAL.read_text())
CELLS = [b["extra_info"]["cell"]["id"] for b in DATA["benchmarks"]]
NODEIDS = {b["extra_info"]["cell"]["id"]: b["fullname"] for b in DATA["benchmarks"]}
FASTER = ("throughput",)  # metric names containing this scale with speed; times scale with 1/speed


def fingerprint(**upgrade: str) -> Fingerprint:
    fp = Fingerprint.from_dict(DATA["machine_info"]["batchperf"])
    return Fingerprint(fp.identity, {**fp.upgrade, **upgrade}, fp.soft)


def scaled(info: dict[str, Any], speed: float) -> dict[str, Any]:
    """A cell's extra_info as if it ran ``speed`` times as fast (throughputs ×speed, latencies ÷speed)."""
    info = copy.deepcopy(info)
    info.pop("traces", None)
    for section in [info["metrics"], *info["rounds"]]:
        for key, value in section.items():
            if key.startswith(("n_", "completed", "failed", "total_input", "total_output")):
                continue
            section[key] = value * speed if any(f in key for f in FASTER) else value / speed
    return info


def write_results(path: Path, speeds: dict[str, float], identity: dict[str, Any] | None = None,
                  round_s: float | None = None, figures: dict[tuple[str, str], float] | None = None) -> None:
    """``round_s``: every round's ``duration`` (else the real file's, scaled); ``figures``: (section, name) -> a value
    every cell records there (an engine counter, CPU per token)."""
    data = copy.deepcopy({k: v for k, v in DATA.items() if k != "benchmarks"})
    if identity is not None:
        data["machine_info"]["batchperf"]["identity"] = identity
    data["benchmarks"] = [{**b, "extra_info": scaled(b["extra_info"], speeds[b["extra_info"]["cell"]["id"]])}
                          for b in DATA["benchmarks"] if b["extra_info"]["cell"]["id"] in speeds]
    for bench in data["benchmarks"]:
        for (section, name), value in (figures or {}).items():
            bench["extra_info"].setdefault(section, {})[name] = value
    if round_s is not None:
        for bench in data["benchmarks"]:
            for one in bench["extra_info"]["rounds"]:
                one["duration"] = round_s
    path.write_text(json.dumps(data))


def write_junit(path: Path, outcomes: dict[str, Outcome]) -> None:
    cases = []
    for cid, out in outcomes.items():
        inner = {"passed": "", "failed": f'<failure message="{out.message}"/>', "error": f'<error message="{out.message}"/>',
                 "skipped": f'<skipped message="{out.message}"/>'}[out.status]
        cases.append(f'<testcase classname="perf_tests.test_cells" name="test_cell[{cid}]">{inner}</testcase>')
    path.write_text(f'<?xml version="1.0"?><testsuites><testsuite>{"".join(cases)}</testsuite></testsuites>')


@dataclass
class FakeEnvs:
    """Each environment label -> a speed factor (B/A = speed_B / speed_A) and behaviour; records every run."""

    speed: dict[str, float] = field(default_factory=lambda: {"A": 1.0, "B": 1.0})
    noise: float = 0.03  # sd of each process's log speed
    cells: Sequence[str] = tuple(CELLS[:2])
    fails: dict[str, dict[str, str]] = field(default_factory=dict)  # label -> cell -> message (fails there)
    crash: set[str] = field(default_factory=set)  # labels whose pytest dies
    killed: dict[int, int] = field(default_factory=dict)  # run number (1-based) -> exit status of a process killed
    interrupt_at: int | None = None  # run number (1-based) that raises KeyboardInterrupt
    identity: dict[str, dict[str, Any]] = field(default_factory=dict)  # label -> identity in its results
    versions: dict[str, dict[str, str]] = field(default_factory=dict)
    seed: int = 0
    runs: list[tuple[str, list[str]]] = field(default_factory=list)
    timeouts: list[float | None] = field(default_factory=list)  # each run's timeout_s
    seconds: float = 20.0  # what each fake process says it took
    round_s: float | None = None  # each round's duration in its results; seconds is then the start-up + the rounds
    on_run: Callable[[], None] | None = None
    # label -> (section, name) -> a figure its processes record, divided by the process's speed (a time per token)
    figures: dict[str, dict[tuple[str, str], float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)

    def probe(self, env: Environment) -> Probe:
        return Probe(fingerprint(**self.versions.get(env.label, {})), "src/batchperf/__init__.py", "")

    def collect(self, env: Environment, args: Sequence[str]) -> dict[str, str]:
        return {cid: NODEIDS[cid] for cid in self.cells}

    def run(self, env: Environment, args: Sequence[str], stem: Path, timeout_s: float | None = None) -> SideRun:
        self.runs.append((env.label, list(args)))
        self.timeouts.append(timeout_s)
        if self.on_run is not None:
            self.on_run()
        if self.interrupt_at == len(self.runs):
            raise KeyboardInterrupt
        log = stem.with_suffix(".log")
        log.write_text("fake pytest\n" + ("INTERNALERROR> boom\n" if env.label in self.crash else ""))
        if env.label in self.crash:
            return SideRun(env.label, 3, self.seconds, None, log)
        if (status := self.killed.get(len(self.runs))) is not None:
            return SideRun(env.label, status, self.seconds, None, log)
        gone = {cell_key(a.split("=", 1)[1]) for a in args if a.startswith("--deselect=")}
        chosen = [c for c in self.cells if c not in gone]
        failing = self.fails.get(env.label, {})
        speed = self.speed[env.label] * math.exp(self.rng.normal(0, self.noise))
        written = [c for c in chosen if c not in failing]
        write_results(stem.with_suffix(".json"), {c: speed for c in written}, self.identity.get(env.label),
                      self.round_s, {k: v / speed for k, v in self.figures.get(env.label, {}).items()})
        outcomes = {c: Outcome("failed", failing[c]) if c in failing else Outcome("passed") for c in chosen}
        write_junit(stem.with_suffix(".xml"), outcomes)
        seconds = self.seconds
        if self.round_s is not None:  # the start-up, then every round the results hold, warm-up rounds too
            per_cell = {b["extra_info"]["cell"]["id"]: len(b["extra_info"]["rounds"])
                        + b["extra_info"]["cell"]["warmup_rounds"] for b in DATA["benchmarks"]}
            seconds += self.round_s * sum(per_cell[c] for c in written)
        return SideRun(env.label, 1 if failing else 0, seconds, stem.with_suffix(".json"), log, outcomes)
