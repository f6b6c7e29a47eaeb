"""batchperf: a pytest-based performance regression suite for LLM inference batching."""

__version__ = "0.1.0"
