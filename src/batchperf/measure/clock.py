"""A run-relative clock that synchronises the device before every read."""

from __future__ import annotations

import time
from typing import Any


def synchronize(device: Any) -> None:
    """Wait for queued device work; without this a GPU timestamp is wrong."""
    if getattr(device, "type", "cpu") == "cuda":
        import torch

        torch.cuda.synchronize(device)


class RunClock:
    """Seconds since ``start()``, read after a device synchronisation."""

    def __init__(self, device: Any = None) -> None:
        self.device = device
        self._t0 = 0.0

    def start(self) -> None:
        synchronize(self.device)
        self._t0 = time.perf_counter()

    def now(self) -> float:
        synchronize(self.device)
        return time.perf_counter() - self._t0

    def since_start(self, perf_counter_s: float) -> float:
        """Run time of a ``time.perf_counter()`` reading taken elsewhere (a library's own token stamps)."""
        return perf_counter_s - self._t0

    def sleep_until(self, t: float) -> None:
        delay = t - (time.perf_counter() - self._t0)
        if delay > 0:
            time.sleep(delay)
