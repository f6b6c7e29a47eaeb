"""What every fake ``pynvml`` module of the tests shares: start-up (or its failure) and shutdown."""

from __future__ import annotations


class FakeNvmlLibrary:
    class NVMLError(Exception):
        pass

    def __init__(self, init_error: str | None = None) -> None:
        self.init_error = init_error  # nvmlInit raises NVMLError(init_error), as without a driver
        self.shutdowns = 0

    def nvmlInit(self) -> None:
        if self.init_error:
            raise self.NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1
