"""Session-wide caches: each model is loaded once, each backend built once per model.

A failure is cached too, so every cell of a model that does not load reports
the same clear error without trying again, while other models' cells run.
"""

from __future__ import annotations

from batchperf.backends import Backend, create_backend
from batchperf.suite.models import LoadedModel, ModelSpec, get_model_spec, load_model


class ModelPool:
    def __init__(self, overrides: dict[str, str] | None = None) -> None:
        self.overrides = overrides or {}
        self._models: dict[tuple[str, str], LoadedModel | Exception] = {}
        self.loads: list[str] = []  # one entry per from_pretrained actually done

    def spec(self, name: str) -> ModelSpec:
        return get_model_spec(name, self.overrides)

    def get(self, name: str, device: str) -> LoadedModel:
        key = (name, device)
        if key not in self._models:
            try:
                self._models[key] = load_model(self.spec(name), device)
                self.loads.append(name)
            except Exception as exc:  # cached: later cells of this model fail the same way, fast
                self._models[key] = exc
        found = self._models[key]
        if isinstance(found, Exception):
            raise found
        return found

    def dummy_weights(self) -> list[str]:
        """Names of the loaded models that run on dummy weights, each once."""
        return sorted({m.name for m in self._models.values() if isinstance(m, LoadedModel) and m.weights == "dummy"})


class BackendPool:
    def __init__(self) -> None:
        self._backends: dict[tuple[str, int, int], Backend | Exception] = {}

    def get(self, name: str, model: LoadedModel, tp: int = 1) -> Backend:
        key = (name, id(model), tp)
        if key not in self._backends:
            try:
                # only a tensor-parallel cell passes the option, so other backends' factories need not take it
                options = {"tensor_parallel_size": tp} if tp > 1 else {}
                self._backends[key] = create_backend(name, model, **options)
            except Exception as exc:
                self._backends[key] = exc
        found = self._backends[key]
        if isinstance(found, Exception):
            raise found
        return found

    def close(self) -> list[str]:
        """Close every backend; returns the errors met (closing must not stop at the first)."""
        errors: list[str] = []
        for (name, _, _), backend in self._backends.items():
            if not isinstance(backend, Exception):
                try:
                    backend.close()
                except Exception as exc:  # noqa: BLE001 - report, keep closing the rest
                    errors.append(f"{name}: {exc}")
        self._backends.clear()
        return errors

