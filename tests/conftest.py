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


pytest_plugins = ["pytester"]


@pytest.fixture
def no_hub(monkeypatch: pytest.MonkeyPatch) -> list:
    """No network but loopback in this test (tests/no_hub.py); returns the list of refused addresses."""
    from no_hub import install

    return install(monkeypatch.setattr)
