"""batchperf's continuous-batching engine: torch-free scheduling, paged KV bookkeeping, one model runner,
and :class:`~batchperf.engine.llm_engine.LLMEngine`, whose ``step()`` wires them.

Only :mod:`batchperf.engine.model_runner` imports torch; import it directly when needed.
"""
