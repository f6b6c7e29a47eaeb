"""Study folders of the detector (``batchperf.calibrate``) without running it: ``ab.json`` files as
``AbResult.to_dict`` writes them, for one cell deciding on output_throughput."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from batchperf.ab.stats.signed_rank import per_look_level


def verdict_doc(ratios: list[float], seconds: float, status: str, max_pairs: int = 14,
                max_minutes: float = 10.0) -> dict[str, Any]:
    """An ab.json whose pairs had these B/A ratios, each pair ``seconds`` long."""
    level, _ = per_look_level(max_pairs, 0.05)
    a = [100.0] * len(ratios)
    b = [100.0 * r for r in ratios]
    return {
        "status": status, "elapsed_s": 20.0 + seconds * len(ratios), "load_avg_1m": None,
        "settings": {"margin": 0.03, "metrics": ["output_throughput"], "alpha": 0.05, "per_look_level": level,
                     "max_pairs": max_pairs, "max_minutes": max_minutes, "rounds": 3, "pytest_args": []},
        "pairs": [{"order": ["A", "B"], "A": {"seconds": seconds / 2}, "B": {"seconds": seconds / 2}} for _ in ratios],
        "cells": [{"verdict": "regression", "metrics": [
            {"metric": "output_throughput", "a": a, "b": b, "estimate": -0.1, "low": -0.2, "high": -0.05}]}],
    }


def keep(folder: Path, doc: dict[str, Any]) -> None:
    """``doc`` as a kept verdict's folder."""
    folder.mkdir(parents=True)
    (folder / "ab.json").write_text(json.dumps(doc))
