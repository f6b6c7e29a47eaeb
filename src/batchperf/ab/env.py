"""An environment of ``batchperf ab``/``bisect``: a Python interpreter, environment variables, a checkout.

Everything here runs the environment's own interpreter in a child process; this process never
imports torch, transformers or vLLM. The child runs the checkout's code (``DIR/src`` first on
``PYTHONPATH``) and its ``perf_tests``, with pytest's plugin autoloading off and the two plugins it
needs named (:data:`batchperf.launch.suite.PLUGINS`), so both sides load exactly
the same plugins whatever else their virtualenvs hold, and a virtualenv without batchperf installed
works as well as one with it.

- :func:`probe`: can this environment import the project, and what are its fingerprint (hardware
  identity, upgrade axes) and checkout commit?
- :func:`collect`: the cells a selection names in this environment (``pytest --collect-only``).
- :class:`SideRun`: what one pytest process of an environment left (results JSON, junit XML, a log); the
  designs that start those processes are :mod:`batchperf.ab.designs`'.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from batchperf.launch.child import run_guarded
from batchperf.launch.suite import PLUGINS, suite_command
from batchperf.regress.fingerprint import Fingerprint

PROBE = """
import json, sys
out = {"python": sys.executable}
try:
    import batchperf
    out["batchperf_file"] = batchperf.__file__
    from batchperf.regress.fingerprint import current
    out["fingerprint"] = current().to_dict()
    import {plugins}  # what every run loads
except BaseException as exc:  # report anything, the parent explains it
    out["error"] = f"{type(exc).__name__}: {exc}"
print("BATCHPERF-PROBE " + json.dumps(out))
""".replace("{plugins}", ", ".join(PLUGINS))
OUTPUT_TAIL = 3000  # characters of a child's output kept in an error message


class EnvironmentProblem(ValueError):
    """An environment that cannot be used as given; the message names it, the problem and the fix."""


class ArgumentsRejected(EnvironmentProblem):
    """pytest's own usage error (exit 4) on the pytest arguments after ``--``: the same in every environment."""


PYTEST_USAGE_ERROR = 4  # pytest.ExitCode.USAGE_ERROR: an unknown option, a malformed -m or -k expression


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

    def pytest_command(self, args: Sequence[str], results: Path | None = None, junit: Path | None = None,
                       quick_exit: bool = True) -> list[str]:
        """``python -m pytest perf_tests ARGS`` as :data:`~batchperf.launch.suite.QUICK_EXIT` runs it (no
        ``perf_tests`` added when ARGS name a path in it), quiet, with the plugins named."""
        suite = [] if any(a.startswith("perf_tests") for a in args) else ["perf_tests"]
        return suite_command([*suite, *args], python=self.python, results=results, junit=junit, quiet=True,
                             no_cache=True, plugins=True, quick_exit=quick_exit)


def default_checkout() -> Path:
    """The batchperf checkout this code runs from (src layout), else the current folder."""
    root = Path(__file__).resolve().parents[3]
    return root if (root / "pyproject.toml").exists() and (root / "perf_tests").is_dir() else Path.cwd()


def parse_vars(entries: Sequence[str], option: str) -> tuple[tuple[str, str], ...]:
    """``["K=V", ...]`` -> pairs; EnvironmentProblem names a malformed entry and the ``option`` it came with."""
    pairs = []
    for entry in entries:
        key, sep, value = entry.partition("=")
        if not sep or not key.strip():
            raise EnvironmentProblem(f"{option} {entry!r}: expected K=V, e.g. BATCHPERF_INJECT_SLOWDOWN=0.05")
        pairs.append((key.strip(), value))
    return tuple(pairs)


def interpreter(path: Path) -> Path:
    """A virtualenv folder stands for its ``bin/python``. A path that exists from here is made absolute (not
    resolved: a virtualenv's python is a link that must stay one), since every process runs in its checkout's
    folder: ``--python .venv-x --dir ../other`` named ``../other/.venv-x`` before, which does not exist."""
    path = path / "bin" / "python" if path.is_dir() else path
    return path.absolute() if path.exists() else path


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
    return text[-OUTPUT_TAIL:].strip()


def is_checkout(env: Environment, fix: str) -> None:
    """``env.dir`` is a batchperf checkout, else EnvironmentProblem naming it and ``fix`` (how the caller's options
    give one): ab's probe, and chain's and bisect's check before anything runs."""
    if not (env.dir / "perf_tests").is_dir() or not (env.dir / "src" / "batchperf").is_dir():
        raise EnvironmentProblem(f"{env.dir}: not a batchperf checkout (no perf_tests/ or src/batchperf/); {fix}")


def probe(env: Environment, timeout: float = 300) -> Probe:
    """Check that ``env`` exists and imports the project; its fingerprint. EnvironmentProblem says what is wrong."""
    name = f"environment {env.label} ({env.python})"
    if not env.python.exists():
        raise EnvironmentProblem(f"{name}: no such interpreter. Make a virtualenv with `batchperf env make --pip SPEC "
                                 f"DIR` and pass DIR/bin/python")
    try:
        is_checkout(env, "pass --a-dir/--b-dir CHECKOUT")
    except EnvironmentProblem as exc:
        raise EnvironmentProblem(f"{name}: {exc}") from None
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
    with tempfile.TemporaryFile("w+", encoding="utf-8") as fh:
        done = run_guarded(cmd, cwd=env.dir, env=env.process_env(), stdout=fh, timeout_s=timeout)
        fh.seek(0)
        output = fh.read()
    if done.timed_out:
        raise subprocess.TimeoutExpired(cmd, timeout, output)
    if done.returncode == PYTEST_USAGE_ERROR:
        raise ArgumentsRejected(f"pytest rejects the arguments after `--` ({' '.join(args) or 'none'}), a usage "
                                f"error (exit 4); correct them:\n{_tail(output)}")
    if done.returncode not in (0, 5):
        raise EnvironmentProblem(f"environment {env.label}: pytest could not collect the cells (exit "
                                 f"{done.returncode}); check the pytest arguments after `--`:\n"
                                 f"{_tail(output)}")
    ids = [ln.strip() for ln in output.splitlines() if "::" in ln and ln.strip().endswith("]")]
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
    at: str = ""  # the cell a resident worker last named at its round gate ("" when unknown)

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
