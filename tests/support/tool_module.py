"""A script of ``tools/`` or ``studies/<topic>/`` imported as a module for its tests (the scripts are not a package)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from paths import REPO


def script_path(name: str) -> Path:
    """``tools/<name>.py`` or ``studies/<topic>/<name>.py``: the one script of that name (a second is an error, so
    a test never imports the wrong one)."""
    found = [*REPO.glob(f"tools/{name}.py"), *REPO.glob(f"studies/*/{name}.py")]
    if len(found) != 1:
        raise LookupError(f"script {name!r}: {len(found)} files in tools/ and studies/*/ ({found}); want exactly one")
    return found[0]


@contextmanager
def tool_module(name: str) -> Iterator[ModuleType]:
    """The script ``name`` imported under ``name`` (dataclasses look their module up by name) for the ``with``."""
    spec = importlib.util.spec_from_file_location(name, script_path(name))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[name]
