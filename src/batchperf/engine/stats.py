"""What the engine did, step by step: the figures behind a run's engine counters.

Pure Python, like the scheduler. :meth:`StepStats.observe` is called once per
step, after scheduling, with what the scheduler formed; the backend turns the
totals into counters in vLLM's names (:mod:`batchperf.measure.counters`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class StepStats:
    steps: int = 0  # forward passes
    tokens: int = 0  # tokens scheduled over all steps: prompt chunks, and one per decoding request
    request_steps: int = 0  # requests scheduled, summed over steps (/ steps: the batch formed, in requests)
    peak_running: int = 0  # most requests running after a step was scheduled
    peak_waiting: int = 0  # most requests queued (not running) after a step was scheduled

    def observe(self, num_requests: int, num_tokens: int, running: int, waiting: int) -> None:
        self.steps += 1
        self.tokens += num_tokens
        self.request_steps += num_requests
        self.peak_running = max(self.peak_running, running)
        self.peak_waiting = max(self.peak_waiting, waiting)
