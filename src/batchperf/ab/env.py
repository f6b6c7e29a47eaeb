"""An environment of ``batchperf ab``/``bisect``: a Python interpreter, environment variables, a checkout.

Everything here runs the environment's own interpreter in a child process; this process never
imports torch, transformers or vLLM. The child runs the checkout's code (``DIR/src`` first on
``PYTHONPATH``) and its ``perf_tests``, with pytest's plugin autoloading off and the two plugins it
needs named (``batchperf.suite.plugin``, ``pytest_benchmark.plugin``), so both sides load exactly
the same plugins whatever else their virtualenvs hold, and a virtualenv without batchperf installed
works as well as one with it.

- :func:`probe`: can this environment import the project, and what are its fingerprint (hardware
  identity, upgrade axes) and checkout commit?
- :func:`collect`: the cells a selection names in this environment (``pytest --collect-only``).
- :func:`run_cells`: one fresh pytest process: results JSON, junit XML (each cell's outcome), a log.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from batchperf.ab.outdir import create_new
from batchperf.launch.child import finish_guarded, run_guarded, start_guarded
from batchperf.launch.round_gate import Gate, GateClosed
from batchperf.regress.fingerprint import Fingerprint

PLUGINS = ("-p", "batchperf.suite.plugin", "-p", "pytest_benchmark.plugin")
QUIET = ("-q", "-p", "no:cacheprovider")
# pytest's own run to its end (results, junit, its cleanup), then os._exit with its exit code: the interpreter's
# teardown (finalising torch and transformers: 2.6 of 19 s a process on the loaded dev VM) is skipped, and with it
# nothing that was measured or written (studies/ab-quick-exit/README.md). `import pytest` finds the same pytest as
# `python -m pytest` (the working folder first on the path).
QUICK_EXIT = ("import os, sys, pytest; code = int(pytest.main()); "
              "sys.stdout.flush(); sys.stderr.flush(); os._exit(code)")
PROBE = """
import json, sys
out = {"python": sys.executable}
try:
    import batchperf
    out["batchperf_file"] = batchperf.__file__
    from batchperf.regress.fingerprint import current
    out["fingerprint"] = current().to_dict()
    import pytest_benchmark.plugin, batchperf.suite.plugin  # what every run loads
except BaseException as exc:  # report anything, the parent explains it
    out["error"] = f"{type(exc).__name__}: {exc}"
print("BATCHPERF-PROBE " + json.dumps(out))
"""
TAIL = 3000  # characters of a child's output kept in an error message


class EnvironmentProblem(ValueError):
    """An environment that cannot be used as given; the message names it, the problem and the fix."""


@dataclass(frozen=True, slots=True)
class Environment:
    label: str  # "A", "B", or a bisect step's name
    python: Path
    vars: tuple[tuple[str, str], ...] = ()  # K=V set in its processes
    dir: Path = Path(".")  # the batchperf checkout whose perf_tests and src/ run

    def __post_init__(self) -> None:
        for key, _ in self.vars:
            if not key or "=" in key:
                raise ValueError(f"environment {self.label}: bad variable name {key!r}; give K=V")

    def describe(self) -> str:
        extra = "".join(f" {k}={v}" for k, v in self.vars)
        return f"{self.python}{extra} (checkout {self.dir})"

    def process_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ if base is None else base)
        src = str(self.dir.resolve() / "src")
        env["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [env.get("PYTHONPATH")])])
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        env.update(dict(self.vars))
        return env

    def pytest_command(self, args: Sequence[str]) -> list[str]:
        """``python -m pytest perf_tests ARGS`` as :data:`QUICK_EXIT` runs it (no ``perf_tests`` added when ARGS name a
        path in it)."""
        suite = [] if any(a.startswith("perf_tests") for a in args) else ["perf_tests"]
        return [str(self.python), "-c", QUICK_EXIT, *suite, *args, *QUIET, *PLUGINS]


def default_checkout() -> Path:
    """The batchperf checkout this code runs from (src layout), else the current folder."""
    root = Path(__file__).resolve().parents[3]
    return root if (root / "pyproject.toml").exists() and (root / "perf_tests").is_dir() else Path.cwd()


def parse_vars(entries: Sequence[str], label: str) -> tuple[tuple[str, str], ...]:
    """``["K=V", ...]`` -> pairs; EnvironmentProblem names a malformed entry."""
    pairs = []
    for entry in entries:
        key, sep, value = entry.partition("=")
        if not sep or not key.strip():
            raise EnvironmentProblem(f"--{label.lower()}-env {entry!r}: expected K=V, e.g. BATCHPERF_INJECT_SLOWDOWN=0.05")
        pairs.append((key.strip(), value))
    return tuple(pairs)


def interpreter(path: Path) -> Path:
    """A virtualenv folder stands for its ``bin/python``."""
    return path / "bin" / "python" if path.is_dir() else path


@dataclass(frozen=True, slots=True)
class Probe:
    """What an environment is: its fingerprint and the checkout it runs."""

    fingerprint: Fingerprint
    batchperf_file: str
    commit: str  # the checkout's commit (+ "-dirty"), or "" outside git

    @property
    def axes(self) -> dict[str, str]:
        """The upgrade axes, the checkout's commit among them (bisecting commits changes only that)."""
        return {**self.fingerprint.upgrade, **({"checkout": self.commit} if self.commit else {})}


def _tail(text: str) -> str:
    return text[-TAIL:].strip()


def probe(env: Environment, timeout: float = 300) -> Probe:
    """Check that ``env`` exists and imports the project; its fingerprint. EnvironmentProblem says what is wrong."""
    name = f"environment {env.label} ({env.python})"
    if not env.python.exists():
        raise EnvironmentProblem(f"{name}: no such interpreter. Make a virtualenv with `batchperf env make --pip SPEC "
                                 f"DIR` and pass DIR/bin/python")
    if not (env.dir / "perf_tests").is_dir() or not (env.dir / "src" / "batchperf").is_dir():
        raise EnvironmentProblem(f"{name}: {env.dir} is not a batchperf checkout (no perf_tests/ or src/batchperf/); "
                                 "pass --a-dir/--b-dir CHECKOUT")
    try:
        done = subprocess.run([str(env.python), "-c", PROBE], cwd=env.dir, env=env.process_env(),
                              capture_output=True, text=True, timeout=timeout, check=False)
    except OSError as exc:
        raise EnvironmentProblem(f"{name}: cannot start it ({exc.strerror})") from None
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("BATCHPERF-PROBE ")), None)
    found: dict[str, Any] = json.loads(line.split(" ", 1)[1]) if line else {"error": _tail(done.stderr or done.stdout)}
    if "error" in found:
        raise EnvironmentProblem(f"{name}: cannot import the project from {env.dir / 'src'}: {found['error']}. "
                                 f"Install its dependencies there (`batchperf env make`, or `{env.python} -m pip "
                                 f"install -e {env.dir}`)")
    return Probe(Fingerprint.from_dict(found["fingerprint"]), found.get("batchperf_file", ""), checkout_commit(env.dir))


def checkout_commit(folder: Path) -> str:
    try:
        head = subprocess.run(["git", "-C", str(folder), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, timeout=30, check=False)
        dirty = subprocess.run(["git", "-C", str(folder), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30, check=False)
    except OSError:
        return ""
    if head.returncode != 0:
        return ""
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def cell_key(nodeid: str) -> str:
    """A cell's id from a pytest node id or junit name: the text inside the last ``[...]``; else the id itself."""
    if nodeid.endswith("]") and "[" in nodeid:
        return nodeid[nodeid.rindex("[") + 1:-1]
    return nodeid


def collect(env: Environment, args: Sequence[str], timeout: float = 600) -> dict[str, str]:
    """cell id -> pytest node id of every parametrized cell the selection names in ``env``."""
    cmd = env.pytest_command([*args, "--collect-only"])
    done = subprocess.run(cmd, cwd=env.dir, env=env.process_env(), capture_output=True, text=True,
                          timeout=timeout, check=False)
    if done.returncode not in (0, 5):
        raise EnvironmentProblem(f"environment {env.label}: pytest could not collect the cells (exit "
                                 f"{done.returncode}); check the pytest arguments after `--`:\n"
                                 f"{_tail(done.stdout + done.stderr)}")
    ids = [ln.strip() for ln in done.stdout.splitlines() if "::" in ln and ln.strip().endswith("]")]
    return {cell_key(nodeid): nodeid for nodeid in ids}


@dataclass(frozen=True, slots=True)
class Outcome:
    status: str  # passed, failed, error, skipped
    message: str = ""


@dataclass(frozen=True, slots=True)
class SideRun:
    """One fresh process of one environment."""

    label: str
    returncode: int
    seconds: float
    results: Path | None  # the results JSON, when pytest wrote one
    log: Path
    outcomes: dict[str, Outcome] = field(default_factory=dict)  # cell id -> outcome (junit)
    started: float = 0.0  # time.time() at start
    timed_out: bool = False  # stopped because it ran past its time limit

    @property
    def crashed(self) -> bool:
        """pytest itself failed: interrupted (2), internal error (3), usage error (4), timed out, or no results."""
        return self.returncode not in (0, 1, 5) or self.results is None or self.timed_out

    def log_tail(self) -> str:
        try:
            return _tail(self.log.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            return ""


def outcomes(xml_path: Path) -> dict[str, Outcome]:
    """Each test's outcome and message from a junit XML file (empty if there is none)."""
    try:
        root = ET.parse(xml_path).getroot()
    except (OSError, ET.ParseError):
        return {}
    found = {}
    for case in root.iter("testcase"):
        status, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                status = {"failure": "failed"}.get(tag, tag)
                message = (node.get("message") or node.text or "").strip()
                break
        found[cell_key(case.get("name", ""))] = Outcome(status, message[:2000])
    return found


def run_cells(env: Environment, args: Sequence[str], stem: Path, timeout_s: float | None = None) -> SideRun:
    """One pytest process of ``env`` on the cells: ``STEM.json`` (results), ``STEM.xml`` (junit), ``STEM.log``.

    It runs under the group guard (:mod:`batchperf.launch.child`): stopped with its whole process group after
    ``timeout_s``, on SIGINT/SIGTERM to this process (then :class:`~batchperf.launch.child.Stopped` is raised), and
    when this process dies."""
    results, junit, log = stem.with_suffix(".json"), stem.with_suffix(".xml"), stem.with_suffix(".log")
    for path in (results, junit):  # pytest writes these, following links: nothing may be there before it runs
        if os.path.lexists(path):
            raise FileExistsError(errno.EEXIST, "is there already, before its process ran (planted?)", str(path))
    cmd = env.pytest_command([*args, f"--benchmark-json={results}", f"--junitxml={junit}"])
    started, clock = time.time(), time.monotonic()
    with os.fdopen(create_new(log), "w", encoding="utf-8") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        done = run_guarded(cmd, cwd=env.dir, env=env.process_env(), stdout=fh, timeout_s=timeout_s)
    return SideRun(env.label, done.returncode, time.monotonic() - clock, results if results.exists() else None, log,
                   outcomes(junit), started, done.timed_out)


def run_resident(envs: Mapping[str, Environment], args: Sequence[str], stems: Mapping[str, Path],
                 order: tuple[str, str], cells: Sequence[str], timeout_s: float | None = None,
                 duet: bool = False) -> dict[str, SideRun]:
    """One process of each environment at once, as **resident workers taking turns** (``ab --design resident``).

    Both start together (their imports and model builds overlap: nothing is measured then) and each holds at the
    round gate (:mod:`batchperf.launch.round_gate`) before every round of a cell, warm-up included, and after its
    last. When both wait at the same round, they are released one after the other, ``order`` first and then
    alternating (A B | B A | A B …), so neither measures while the other does and the two sides' rounds lie
    seconds apart. When they wait at different points (a cell one side skipped or failed), the side behind in
    ``cells`` (the collection order) goes alone; a side that ended leaves the other to run on alone. Each side's
    files are :func:`run_cells`'s; ``timeout_s`` bounds the pair as a whole (both are stopped when it passes).

    ``duet`` (``ab --design duet``): both sides measure **at the same time**, each pinned to a core of its own
    (``order[0]`` the first of this process's cores, ``order[1]`` the second: the order swaps every pair, and so
    do the cores), released together at each round."""

    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    files = {label: {k: stems[label].with_suffix(k) for k in (".json", ".xml", ".log")} for label in order}
    for label in order:
        for path in (files[label][".json"], files[label][".xml"]):
            if os.path.lexists(path):
                raise FileExistsError(errno.EEXIST, "is there already, before its process ran (planted?)", str(path))
    cores = duet_cores(order) if duet else {}
    sockets = Path(tempfile.mkdtemp(prefix="batchperf-gate-"))
    gates = {label: Gate(sockets / label) for label in order}
    procs: dict[str, Any] = {}
    logs: dict[str, Any] = {}
    started: dict[str, float] = {}
    clocks: dict[str, float] = {}
    ended: dict[str, float] = {}
    timed_out = False
    try:
        for label in order:
            env = envs[label]
            cmd = env.pytest_command([*args, f"--benchmark-json={files[label]['.json']}",
                                      f"--junitxml={files[label]['.xml']}"])
            logs[label] = os.fdopen(create_new(files[label][".log"]), "w", encoding="utf-8")
            logs[label].write("$ " + " ".join(cmd) + "\n")
            logs[label].flush()
            started[label], clocks[label] = time.time(), time.monotonic()
            procs[label] = start_guarded(cmd, cwd=env.dir, env=dict(env.process_env(), **dict([gates[label].env()])),
                                         stdout=logs[label], cpus=cores[label] if duet else None)

        def hear(label: str) -> str | None:
            left = 1e9 if deadline is None else deadline - time.monotonic()
            try:
                return gates[label].next(lambda: procs[label].poll() is None, max(left, 0.0))
            except GateClosed:
                ended.setdefault(label, time.monotonic())
                return None

        said = {label: hear(label) for label in order}
        turns = 0  # paired releases since both last passed an end
        while any(said.values()):
            if deadline is not None and time.monotonic() > deadline:
                timed_out = True
                break
            live = [label for label in order if said[label] is not None]
            if len(live) == 2 and said[live[0]] == said[live[1]]:
                ending = str(said[live[0]]).startswith("end ")
                together = duet or ending
                for label in (order if turns % 2 == 0 or together else order[::-1]):
                    gates[label].go()
                    if not together:
                        said[label] = hear(label)
                if together:  # both at once: a duet's round, or what follows an end (the next cell, the exit)
                    said = {label: hear(label) for label in order}
                turns = 0 if ending else turns + 1
                continue
            label = min(live, key=lambda lb: _position(str(said[lb]), cells))
            gates[label].go()
            said[label] = hear(label)
        codes = {}
        for label in order:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            done = finish_guarded(procs[label], left, stop=timed_out)
            codes[label] = (done.returncode, done.timed_out or timed_out)
            ended.setdefault(label, time.monotonic())
    except BaseException:
        for proc in procs.values():
            finish_guarded(proc, stop=True)
        raise
    finally:
        for gate in gates.values():
            gate.close()
        for fh in logs.values():
            fh.close()
        with contextlib.suppress(OSError):
            sockets.rmdir()
    return {label: SideRun(label, codes[label][0], ended[label] - clocks[label],
                           files[label][".json"] if files[label][".json"].exists() else None, files[label][".log"],
                           outcomes(files[label][".xml"]), started[label], codes[label][1]) for label in order}


def duet_cores(order: tuple[str, str]) -> dict[str, frozenset[int]]:
    """A duet's cores: the first two this process may run on, ``order[0]`` on the first. EnvironmentProblem when
    there are fewer than two."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise EnvironmentProblem(f"--design duet pins A and B to a core each and needs two; this process may use "
                                 f"{len(cores)} ({cores}); use --design resident")
    return {order[0]: frozenset({cores[0]}), order[1]: frozenset({cores[1]})}


def _position(message: str, cells: Sequence[str]) -> tuple[int, int]:
    """Where a gate message stands in the run: (the cell's index in the collection order, 0 at a round / 1 at its
    end); a cell not in the list counts as first, so it is never left waiting."""
    what, _, cell = message.partition(" ")
    return (cells.index(cell) if cell in cells else -1, 1 if what == "end" else 0)
