"""A script of ``tools/`` imported as a module for its tests (the scripts are not a package)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

from paths import REPO

TOOLS = REPO / "tools"


@contextmanager
def tool_module(name: str, beside: bool = False) -> Iterator[ModuleType]:
    """``tools/<name>.py`` imported under ``name`` (dataclasses look their module up by name) for the ``with``;
    ``beside``: with ``tools/`` on sys.path, for a script that imports another script, as it does when run."""
    if beside:
        sys.path.insert(0, str(TOOLS))
    spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[name]
        if beside:
            sys.path.remove(str(TOOLS))
