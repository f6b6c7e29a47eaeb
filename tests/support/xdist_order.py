"""How ``make test`` deals the unit tests out to its pytest-xdist workers: by module, the slow modules first.

The two hooks below are tests/conftest.py's (it imports them). Each module's tests run on one worker (xdist's
loadscope), so a module-scoped fixture that takes tens of seconds (a vLLM engine, a nightly run) is built once;
spread over two workers, each would build its own. The session's one real vLLM server run
(``stream4_server_run``) is shared across two modules: the oracle's vllm-server case joins the server tests'
module (``SAME_WORKER_AS``). xdist_group marks cannot do this: with pytest 9.2, xdist 3.8's loadgroup no longer
renames the node ids it groups by, and silently runs as plain load.

Which module goes first decides when the run ends: on two workers, a module of a minute dealt out last keeps one
worker busy for that minute while the other has nothing left to take. So the modules that hold a test marked
``slow`` are collected first (long jobs first, as a list scheduler deals them); the hundreds of quick modules
behind them keep both workers busy to the end. xdist's own order (``--loadscope-reorder``, its default: the
modules with the most tests first) is not used: it puts sixty quick tests ahead of one test that takes a minute.
"""

from __future__ import annotations

from typing import Any, Protocol

SAME_WORKER_AS = {
    "tests/measure/test_metrics_vllm_oracle.py::test_every_metric_of_a_real_run_equals_vllms[vllm-server]":
        "tests/backends/test_vllm_server.py",
}


class Item(Protocol):
    nodeid: str

    def get_closest_marker(self, name: str) -> Any: ...


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def slow_modules_first(items: list[Item]) -> list[Item]:
    """``items`` with every module that holds a ``slow`` test moved ahead of the rest, each module's tests still
    together and in their order (a stable sort: the slow modules keep their collection order among themselves)."""
    slow = {module_of(item.nodeid) for item in items if item.get_closest_marker("slow") is not None}
    return sorted(items, key=lambda item: module_of(item.nodeid) not in slow)


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: the controller deals the modules out in this order
        items[:] = slow_modules_first(items)


def pytest_xdist_make_scheduler(config: Any, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class ByModule(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return SAME_WORKER_AS.get(nodeid) or module_of(nodeid)

    config.option.loadscopereorder = False  # the collection's order (slow modules first), not most-tests-first
    return ByModule(config, log)
