"""Whether a GPU cell's clocks held: the SM clock's drop during a cell, and the rule that voids a cell.

A GPU whose SM clock falls during a cell (heat, a hardware slowdown, an external power brake) measures the
card's state, not the code: such a cell is *void*, and the gate and ``compare`` call it "not judged" with the
cause in a note, never a pass (:func:`void_reason`). Two causes void it:

- the SM clock fell by more than :data:`CLOCK_DROP_VOID` (7%) from its highest busy reading earlier in the cell
  (:func:`clock_drop`; readings NVML flags ``gpu_idle`` are left out: an idle card lowers its clock by design);
- a thermal or hardware-slowdown throttle reason was seen during the cell (:data:`VOIDING`).

The software power cap (``sw_power_cap``) is recorded, not voided: a card at full load sits at its power limit
by design, and a baseline taken on the same card sat there too. Only when it pulls the clock down by more than
7% does the drop rule void the cell (then lock the clocks: docs/gpu.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from batchperf.telemetry.nvml import IDLE

CLOCK_DROP_VOID = 0.07  # a fall of the SM clock beyond this share voids the cell
# throttle reasons (batchperf.telemetry.nvml.THROTTLE_BITS names) that void a cell: heat and hardware slowdowns
VOIDING = ("hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
RECORDED = ("sw_power_cap",)  # recorded and named in the verdict's notes, never voiding


def clock_drop(samples: Iterable[tuple[float | None, int | None]]) -> float | None:
    """The largest relative fall of the SM clock from its highest earlier reading, over ``(MHz, throttle mask)``
    samples in time order; samples NVML flags idle, or without a clock, are skipped. None without two busy
    readings."""
    peak, drop, seen = 0.0, 0.0, 0
    for clock, mask in samples:
        if clock is None or (mask is not None and mask & IDLE):
            continue
        seen += 1
        peak = max(peak, clock)
        if peak > 0:
            drop = max(drop, (peak - clock) / peak)
    return drop if seen >= 2 else None


def void_reason(telemetry: Mapping[str, Any]) -> str | None:
    """Why a cell with this telemetry (``CellRecord.telemetry``) is void, or None when its clocks held (or it ran
    where NVML could not say: a CPU cell, no nvidia-ml-py)."""
    why = []
    drop = telemetry.get("sm_clock_drop")
    if isinstance(drop, (int, float)) and drop > CLOCK_DROP_VOID:
        why.append(f"the SM clock fell {drop:.1%} during the cell (more than {CLOCK_DROP_VOID:.0%}; "
                   f"start {_mhz(telemetry.get('sm_clock_start_mhz'))}, lowest {_mhz(telemetry.get('sm_clock_min_mhz'))})")
    reasons = telemetry.get("throttle_reasons") or []
    if voiding := [r for r in reasons if r in VOIDING]:
        why.append(f"throttled by {', '.join(voiding)} during the cell")
    return "; ".join(why) or None


def recorded_reasons(telemetry: Mapping[str, Any]) -> list[str]:
    """The throttle reasons seen during the cell that are recorded but do not void it (the software power cap)."""
    return [r for r in telemetry.get("throttle_reasons") or [] if r in RECORDED]


def _mhz(value: object) -> str:
    return f"{value:.0f} MHz" if isinstance(value, (int, float)) else "?"
