"""The one NVML reader (the ``pynvml`` module of nvidia-ml-py): start it, find a device, read without failing.

:func:`open_nvml` gives an :class:`Nvml` session, or :class:`Unavailable` with the reason when nvidia-ml-py
is missing or NVML does not start (no driver, no GPU): NVML is optional everywhere in batchperf, so that is
an answer, never an exception. pynvml is imported inside :func:`open_nvml`, so importing batchperf never
loads it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType, TracebackType
from typing import Any, TypeVar

T = TypeVar("T")

INSTALL_HINT = "pip install nvidia-ml-py"
IDLE = 0x1  # the "GPU idle" throttle reason: not a slowdown
# NVML's clocks-event (throttle) reason bits (nvml.h, nvmlClocksEventReason*)
THROTTLE_BITS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
                 0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
                 0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting"}


@dataclass(frozen=True, slots=True)
class Unavailable:
    """Why NVML cannot be read here; ``installed`` is False when nvidia-ml-py itself is missing."""

    error: str
    installed: bool = True

    @property
    def reason(self) -> str:
        return self.error if self.installed else f"{self.error} ({INSTALL_HINT})"


class Nvml:
    """A started NVML: ``lib`` is pynvml (or a stand-in). Close it when done, or use it in a ``with`` block."""

    __slots__ = ("lib", "_open")

    def __init__(self, lib: Any) -> None:
        self.lib = lib
        self._open = True

    def read(self, fn: Callable[..., T], *args: Any) -> T | None:
        """``fn(*args)``, or None when NVML answers with an error ("Not Supported" on this device, no permission)."""
        try:
            return fn(*args)
        except self.lib.NVMLError:
            return None

    def handle(self, index: int, uuid: str | None = None) -> Any:
        """The device's handle: by ``uuid`` (``GPU-…``) when given, since CUDA_VISIBLE_DEVICES renumbers the
        devices a process sees and NVML does not; by ``index`` without one, or when NVML does not know it (MIG,
        an older driver)."""
        if uuid is not None:
            found = self.read(self.lib.nvmlDeviceGetHandleByUUID, uuid)
            if found is not None:
                return found
        return self.lib.nvmlDeviceGetHandleByIndex(index)

    def throttle_mask(self, handle: Any) -> int | None:
        """The device's current throttle mask, or None where it cannot say. NVML renamed the call "clocks event
        reasons"; either will do."""
        read = (getattr(self.lib, "nvmlDeviceGetCurrentClocksEventReasons", None)
                or self.lib.nvmlDeviceGetCurrentClocksThrottleReasons)
        mask = self.read(read, handle)
        return None if mask is None else int(mask)

    def close(self) -> None:
        """Shut NVML down, once; best effort, since the readings are already taken."""
        if self._open:
            self._open = False
            try:
                self.lib.nvmlShutdown()
            except Exception:
                pass

    def __enter__(self) -> Nvml:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def open_nvml(module: ModuleType | None = None) -> Nvml | Unavailable:
    """NVML, started; ``module`` stands in for pynvml (tests pass a fake)."""
    lib = module
    if lib is None:
        try:
            import pynvml as lib
        except ImportError as exc:
            return Unavailable(str(exc), installed=False)
    try:
        lib.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, NVMLError_DriverNotLoaded, ...
        return Unavailable(str(exc))
    return Nvml(lib)


def text(value: bytes | str) -> str:
    """An NVML string: older nvidia-ml-py returns bytes, newer str."""
    return value.decode() if isinstance(value, bytes) else str(value)


def throttle_names(mask: int) -> list[str]:
    """The names of the reasons set in a throttle mask (unknown bits as hex)."""
    names = [name for bit, name in THROTTLE_BITS.items() if mask & bit]
    if rest := mask & ~sum(THROTTLE_BITS):
        names.append(f"0x{rest:x}")
    return names


def slowdowns(mask: int) -> list[str]:
    """The reasons in a throttle mask that slow the GPU down: all but ``gpu_idle``."""
    return throttle_names(mask & ~IDLE)
