"""Fixtures for the unit tests."""

import pytest


@pytest.fixture(scope="session")
def tiny_model():
    """The CPU tier's tiny model, built once into the cache and loaded with from_pretrained."""
    from batchperf.suite.models import get_model_spec, load_model

    return load_model(get_model_spec("tiny-qwen2"))


pytest_plugins = ["pytester"]
