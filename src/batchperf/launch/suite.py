"""The one command line that starts the performance suite as a child pytest.

Every caller (``batchperf run``, ``capacity``, ``refresh --run``, ``ab``/``bisect``, the tools) builds its child
with :func:`suite_command` and waits for it with :func:`batchperf.launch.child.run_guarded` (or its
``start_guarded``/``finish_guarded`` halves), so the plugins, the results file and the signals are handled in
one place. The order of the arguments: the interpreter, the runner (``-m pytest`` or the quick exit), ``args``
(what the caller selects), the results and junit files, ``-q`` and ``-p no:cacheprovider`` when asked, the
plugins by name when asked, then ``passthrough`` last, so that what a user gives after ``--`` (and a probe's
load) overrides what came before it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

# The plugins a child loads by name when plugin autoloading is off (PYTEST_DISABLE_PLUGIN_AUTOLOAD), so both sides
# of an A/B load exactly these whatever else their virtualenvs hold. Named as strings (the child may run another
# interpreter), checked to exist by tests/launch/test_suite.py.
PLUGINS = ("batchperf.suite.plugin", "pytest_benchmark.plugin")
# pytest's own run to its end (results, junit, its cleanup), then os._exit with its exit code: the interpreter's
# teardown (finalising torch and transformers: 2.6 of 19 s a process on the loaded dev VM) is skipped, and with it
# nothing that was measured or written (docs/ab.md, "Cheaper pairs"). `import pytest` finds the same pytest as
# `python -m pytest` (the working folder first on the path).
QUICK_EXIT = ("import os, sys, pytest; code = int(pytest.main()); "
              "sys.stdout.flush(); sys.stderr.flush(); os._exit(code)")


def suite_command(args: Sequence[str] = (), *, python: str | Path | None = None, results: Path | None = None,
                  junit: Path | None = None, passthrough: Sequence[str] = (), quiet: bool = False,
                  no_cache: bool = False, plugins: bool = False, quick_exit: bool = False) -> list[str]:
    """``PYTHON -m pytest ARGS [--benchmark-json=RESULTS] [--junitxml=JUNIT] [-q] [-p no:cacheprovider]
    [-p PLUGIN …] PASSTHROUGH`` (``-c QUICK_EXIT`` for ``-m pytest`` when ``quick_exit``); ``python`` defaults to
    this interpreter."""
    runner = ["-c", QUICK_EXIT] if quick_exit else ["-m", "pytest"]
    return [str(python or sys.executable), *runner, *args,
            *([f"--benchmark-json={results}"] if results is not None else []),
            *([f"--junitxml={junit}"] if junit is not None else []),
            *(["-q"] if quiet else []), *(["-p", "no:cacheprovider"] if no_cache else []),
            *(arg for name in (PLUGINS if plugins else ()) for arg in ("-p", name)), *passthrough]


def matrix_argv(options: Mapping[str, object]) -> list[str]:
    """The suite's matrix options as pytest arguments: ``{"batchperf_batch_sizes": "1,4"}`` ->
    ``["--batchperf-batch-sizes=1,4"]``; keys not of the suite (no ``batchperf_`` prefix) and unset values (None)
    are left out."""
    return [f"--{key.replace('_', '-')}={value}" for key, value in options.items()
            if key.startswith("batchperf_") and value is not None]


def tier_command(tier: str, options: Mapping[str, object], results: Path, *, suite: Path | None,
                 passthrough: Sequence[str] = ()) -> list[str]:
    """``batchperf run``'s child: the suite folder (none: the caller names the cells in ``passthrough``), the tier's
    marker, the matrix ``options`` (:func:`matrix_argv`), the results file, no cache, then ``passthrough``."""
    return suite_command([*([str(suite)] if suite is not None else []), "-m", tier, *matrix_argv(options)],
                         results=results, no_cache=True, passthrough=passthrough)
