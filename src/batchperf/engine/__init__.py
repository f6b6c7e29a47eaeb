"""batchperf's continuous-batching engine: torch-free scheduling, paged KV bookkeeping, one model runner.

Only :mod:`batchperf.engine.model_runner` imports torch; import it directly when needed.
"""
