"""Backends: one protocol, registered by name, heavy imports only when one is created.

A backend wraps a loaded model and runs a workload's requests with a batch
size and a concurrency, returning the raw :class:`~batchperf.measure.trace.RunTrace`.
A backend that cannot run here raises :class:`BackendUnavailable` with the
reason; the suite turns that into a skip.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from batchperf.backends.model import LoadedModel
    from batchperf.measure.trace import RunTrace
    from batchperf.workload.spec import Workload


class BackendUnavailable(RuntimeError):
    """This backend cannot run in this environment; the message says why and how to fix it."""


class CellUnsupported(BackendUnavailable):
    """The backend runs here, but not this cell (a given server runs another model or batch size);
    raised by ``run`` before anything is measured. The suite skips the cell with the message."""


@runtime_checkable
class Backend(Protocol):
    name: str

    def run(self, workload: Workload, batch_size: int, concurrency: int) -> RunTrace:
        """Run ``workload.requests`` (never its warm-up) and return the raw trace."""
        ...

    def close(self) -> None:
        """Free what the backend holds (engines, servers, caches)."""
        ...


BackendFactory = Callable[["LoadedModel"], Backend]

# name -> "module:attribute"; imported only when that backend is created.
_BUILTIN: dict[str, str] = {
    "hf-static": "batchperf.backends.hf_static:HFStaticBackend",
    "continuous": "batchperf.backends.continuous:ContinuousBackend",
    "hf-continuous": "batchperf.backends.hf_continuous:HFContinuousBackend",
    "vllm": "batchperf.backends.vllm_engine:VLLMEngineBackend",
    "vllm-prefix-cache": "batchperf.backends.vllm_engine:VLLMPrefixCacheBackend",
    "vllm-server": "batchperf.backends.vllm_server:VLLMServerBackend",
}
_REGISTRY: dict[str, BackendFactory] = {}


def register_backend(name: str, factory: BackendFactory | str) -> None:
    """Register a backend factory (or a lazy ``"module:attr"`` path) under ``name``."""
    if isinstance(factory, str):
        _BUILTIN[name] = factory
    else:
        _REGISTRY[name] = factory


def backend_names() -> list[str]:
    return sorted({*_BUILTIN, *_REGISTRY})


def create_backend(name: str, model: LoadedModel, **options: object) -> Backend:
    """Build backend ``name`` for ``model``; ValueError if unknown, BackendUnavailable if it can't run.

    ``options`` go to the factory as keywords (``tensor_parallel_size`` for a vllm cell with tp > 1).
    """
    factory = _REGISTRY.get(name)
    if factory is None:
        if name not in _BUILTIN:
            raise ValueError(f"unknown backend {name!r}; known backends: {', '.join(backend_names())}")
        module_name, attr = _BUILTIN[name].split(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise BackendUnavailable(f"backend {name!r} needs a package that is not installed: {exc}") from exc
        factory = _REGISTRY[name] = getattr(module, attr)
    if unknown := _unknown_options(factory, options):
        raise ValueError(f"backend {name!r} does not take {', '.join(unknown)} (needed by this cell)")
    return factory(model, **options)


def _unknown_options(factory: BackendFactory, options: dict[str, object]) -> list[str]:
    if not options:
        return []
    params = inspect.signature(factory).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return []
    return [k for k in options if k not in params]
