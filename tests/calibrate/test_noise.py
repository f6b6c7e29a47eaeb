"""batchperf.calibrate.noise: the per-round tables read every process's results file, and say which verdicts
they had to leave out."""

from __future__ import annotations

import copy
import json
import math
import statistics
from pathlib import Path

from detector_samples import keep, verdict_doc
from paths import DATA

from batchperf.calibrate.noise import noise, process_pairs, wall_and_cpu, without_results
from batchperf.calibrate.replay import estimate

REAL = DATA / "results_cpu_small.json"


def test_verdicts_kept_without_their_results_files_still_give_the_verdict_tables(tmp_path: Path) -> None:
    """A study moved into the repository keeps each verdict's ab.json, not its megabytes of results files: the
    verdicts and the estimate still come from it; the per-round tables leave it out and the count says so."""
    doc = verdict_doc([0.9] * 8, 50.0, "done")
    doc["pairs"] = [{**p, "A": {**p["A"], "results": f"pair-{i:03d}-A.json"},
                     "B": {**p["B"], "results": f"pair-{i:03d}-B.json"}} for i, p in enumerate(doc["pairs"], 1)]
    keep(tmp_path / "vllm-0.05-00", doc)
    assert process_pairs(tmp_path) == {} and without_results(tmp_path) == 1
    assert noise(tmp_path, "output_throughput").count("\n") == 1  # the header alone
    assert "| 8 (1) |" in estimate(tmp_path, "output_throughput", 20)


def process_results(path: Path, throughputs: list[float], cpu_per_token: list[float]) -> str:
    """A real CPU-tier results file cut to its first cell, whose rounds had these throughputs and CPU times."""
    data = json.loads(REAL.read_text())
    bench = copy.deepcopy(data["benchmarks"][0])
    info = bench["extra_info"]
    info["rounds"] = [{**info["rounds"][0], "output_throughput": x} for x in throughputs]
    info["metrics"]["output_throughput"] = statistics.median(throughputs)
    info["traces"] = [{**info["traces"][0], "telemetry": {"cpu_seconds_per_output_token": c}} for c in cpu_per_token]
    data["benchmarks"] = [bench]
    path.write_text(json.dumps(data))
    return info["cell"]["id"]


def test_wall_and_cpu_compares_the_two_yardsticks_on_the_same_pairs(tmp_path: Path) -> None:
    """B slept 10% (wall worse, CPU the same): throughput shows it, the CPU time per token, per round's median,
    does not; the last round's CPU figure alone (what records kept before) is the noisier one."""
    folder = tmp_path / "dispatch-0.1-00"
    folder.mkdir()
    pairs, cell = [], None
    for i in range(4):
        wobble = 0.02 * (i % 2)  # only the last round's CPU figure moves between pairs
        sides = {"A": ([100.0, 100.0, 100.0], [1.0, 1.0, 1.0 + 4 * wobble]),
                 "B": ([90.0, 90.0, 90.0], [1.0, 1.0, 1.0 - 4 * wobble])}
        pair = {"order": ["A", "B"] if i % 2 == 0 else ["B", "A"]}
        for label, (wall, cpu) in sides.items():
            path = folder / f"pair-{i:03d}-{label}.json"
            cell = process_results(path, wall, cpu)
            pair[label] = {"results": str(path), "seconds": 10.0}
        pairs.append(pair)
    doc = verdict_doc([0.9] * 4, 20.0, "done")
    doc["pairs"] = pairs
    doc["cells"][0]["id"] = cell
    (folder / "ab.json").write_text(json.dumps(doc))
    row = next(line for line in wall_and_cpu(tmp_path).splitlines() if line.startswith("| dispatch"))
    cols = [c.strip() for c in row.strip("|").split("|")]
    assert cols[2] == "4" and cols[3] == f"{math.log(100 / 90):+.3f} (0.000)"  # throughput: B 10.5% worse
    assert cols[4] == "+0.000 (0.000)"  # the median of the rounds: CPU time cannot see the sleep
    last = [0.0, math.log(0.92 / 1.08)] * 2  # one round's figure wanders
    assert cols[5] == f"{statistics.mean(last):+.3f} ({statistics.stdev(last):.3f})"
    assert "| dispatch" in noise(tmp_path, "output_throughput")  # the same reader feeds the noise table
