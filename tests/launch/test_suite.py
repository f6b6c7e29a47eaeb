"""The one builder of the suite's child pytest (launch/suite.py): its arguments in order, the plugins it names, the
quick exit, the pass-through arguments last."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from batchperf.launch.suite import PLUGINS, QUICK_EXIT, matrix_argv, suite_command, tier_command


@pytest.mark.parametrize("name", PLUGINS)
def test_each_named_plugin_module_exists(name: str) -> None:
    """The plugins are named as strings (the child may be another interpreter): each must still be a module."""
    assert importlib.util.find_spec(name) is not None, name


def test_the_plain_command_is_this_interpreter_running_pytest_on_the_args() -> None:
    assert suite_command(["perf_tests", "-k", "x"]) == [sys.executable, "-m", "pytest", "perf_tests", "-k", "x"]


def test_every_part_in_its_order() -> None:
    cmd = suite_command(["perf_tests", "-m", "cpu"], python=Path("/venv/bin/python"), results=Path("r.json"),
                        junit=Path("r.xml"), passthrough=["--batchperf-load=2"], quiet=True, no_cache=True,
                        plugins=True)
    assert cmd == ["/venv/bin/python", "-m", "pytest", "perf_tests", "-m", "cpu", "--benchmark-json=r.json",
                   "--junitxml=r.xml", "-q", "-p", "no:cacheprovider", "-p", "batchperf.suite.plugin",
                   "-p", "pytest_benchmark.plugin", "--batchperf-load=2"]


def test_the_quick_exit_replaces_dash_m_pytest() -> None:
    cmd = suite_command(["perf_tests"], quick_exit=True)
    assert cmd[:3] == [sys.executable, "-c", QUICK_EXIT] and cmd[3:] == ["perf_tests"]
    assert "os._exit(code)" in QUICK_EXIT and "pytest.main()" in QUICK_EXIT


def test_plugins_are_named_only_when_asked() -> None:
    assert "-p" not in suite_command(["perf_tests"])
    named = suite_command([], plugins=True)
    assert [named[i + 1] for i, a in enumerate(named) if a == "-p"] == list(PLUGINS)


def test_pass_through_comes_last_so_it_overrides() -> None:
    cmd = suite_command(["perf_tests", "--batchperf-load=3"], results=Path("o.json"), no_cache=True,
                        passthrough=["-k", "cell", "--batchperf-load=1.5"])
    assert cmd[-3:] == ["-k", "cell", "--batchperf-load=1.5"]
    assert cmd.index("--batchperf-load=3") < cmd.index("--benchmark-json=o.json") < cmd.index("-k")


def test_matrix_options_become_arguments_and_the_rest_is_left_out() -> None:
    options = {"batchperf_batch_sizes": "1,4", "batchperf_load": None, "tier": "cpu", "batchperf_policies": "aimd"}
    assert matrix_argv(options) == ["--batchperf-batch-sizes=1,4", "--batchperf-policies=aimd"]


def test_the_tier_command_is_batchperf_run_s() -> None:
    cmd = tier_command("cpu", {"batchperf_backends": "continuous", "out": "x"}, Path("r.json"),
                       suite=Path("perf_tests"), passthrough=["-q"])
    assert cmd == [sys.executable, "-m", "pytest", "perf_tests", "-m", "cpu", "--batchperf-backends=continuous",
                   "--benchmark-json=r.json", "-p", "no:cacheprovider", "-q"]
    assert tier_command("gpu", {}, Path("r.json"), suite=None)[3:5] == ["-m", "gpu"]
