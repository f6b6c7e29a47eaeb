"""The gate never passes what it did not judge: a ceiling on noise, bad baseline numbers (issue 14, items 5 and 8).

The last tests are Hypothesis properties: random baselines (NaN, inf, negative, zero, huge spreads,
single rounds) through the gate and through the store, and the verdict is never "pass" for a cell
that was not judged.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from gate_samples import CPU_FP, cell_info, copied, results_file, scaled
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchperf.measure.catalogue import GATED
from batchperf.measure.counters import fraction_problem
from batchperf.regress.gate import GateConfig, compare_cell, judge_against_baseline
from batchperf.regress.store import load_baseline, load_run, write_baseline
from batchperf.regress.verdict import Verdict
from batchperf.results.io import write_results
from batchperf.results.record import MEASURED, CellRecord, ResultsError

TPUT = GATED[0]  # metrics.output_throughput


def with_rounds(factors: list[float], tier: str = "cpu") -> CellRecord:
    """A cell whose rounds are the median cell scaled by ``factors`` (a throughput factor of f is f × the median)."""
    rec = cell_info(tier=tier, spread=0.0)
    rec.rounds = [scaled(rec, 1 / f).metrics for f in factors]
    return rec


# --- 5. a noisy baseline buys no unlimited slack ---------------------------------------------------


def test_one_outlier_round_no_longer_lets_a_99_percent_drop_pass() -> None:
    base = with_rounds([1.0, 1.0, 1.0, 1.0, 0.02])  # one round at 2% of the others
    verdict = compare_cell("c", base, scaled(base, 100.0))  # throughput −99%
    assert verdict.verdict is not Verdict.NO_CHANGE
    tput = next(m for m in verdict.metrics if m.name == "output_throughput")
    assert tput.verdict is Verdict.INCONCLUSIVE


def test_a_cell_whose_spread_exceeds_the_cap_is_too_noisy_to_gate_not_a_pass() -> None:
    base = with_rounds([0.7, 1.0, 1.3])  # ±24% pstdev: 3 × spread = 73% > the CPU cap
    assert 3 * 0.2449 > TPUT.cap("cpu") >= TPUT.floor("cpu")
    verdict = compare_cell("c", base, copied(base))  # identical data: still not a pass
    assert verdict.verdict is Verdict.INCONCLUSIVE and not verdict.failed
    noisy = [m for m in verdict.metrics if m.verdict is Verdict.INCONCLUSIVE]
    assert {m.name for m in noisy} >= {"output_throughput", "request_throughput"}
    assert all("cap" in m.note for m in noisy)


def test_below_the_cap_the_spread_still_widens_the_tolerance() -> None:
    base = with_rounds([0.9, 1.0, 1.1])  # pstdev 8.2%: 3 × = 24.5%, between the CPU floor and cap
    result = judge_against_baseline(TPUT, base, scaled(base, 1.25), "cpu", 3.0)  # −20%
    assert TPUT.floor("cpu") < result.tolerance < TPUT.cap("cpu")
    assert result.verdict is Verdict.NO_CHANGE


def test_a_noisy_cell_still_fails_beyond_its_own_noise() -> None:
    base = with_rounds([0.7, 1.0, 1.3])
    assert compare_cell("c", base, scaled(base, 3.0)).verdict is Verdict.REGRESSION  # −67%, beyond even ±73%


def test_a_raised_floor_raises_the_cap_with_it() -> None:
    base = with_rounds([0.9, 1.0, 1.1])
    config = GateConfig(k=3.0).with_floor("output_throughput", 0.6, "cpu")
    assert judge_against_baseline(next(r for r in config.rules if r.name == "output_throughput"), base, base, "cpu",
                 10.0).verdict is Verdict.INCONCLUSIVE  # 10 × 8.2% = 82% > 60%
    assert judge_against_baseline(next(r for r in config.rules if r.name == "output_throughput"), base, base, "cpu",
                 6.0).verdict is Verdict.NO_CHANGE  # 49% < the 60% floor, which the cap never undercuts


# --- 8. bad numbers in a baseline are never judged as fine ------------------------------------------


@pytest.mark.parametrize("value", [math.nan, math.inf, -100.0])
def test_a_bad_baseline_value_is_not_judged_and_says_so(value: float) -> None:
    base = cell_info()
    base.metrics["output_throughput"] = value  # built in-process: from_dict would refuse it
    verdict = compare_cell("c", base, scaled(cell_info(), 3.0))
    tput = next(m for m in verdict.metrics if m.name == "output_throughput")
    assert tput.verdict is Verdict.NOT_JUDGED and "baseline" in tput.note
    only_tput = compare_cell("c", base, copied(cell_info()))
    assert only_tput.verdict is Verdict.NOT_JUDGED  # never an improvement, never a pass


def test_a_zero_throughput_baseline_is_not_judged() -> None:
    base = cell_info()
    base.metrics["output_throughput"] = 0.0
    assert compare_cell("c", base, cell_info()).verdict is Verdict.NOT_JUDGED


def test_a_baseline_without_any_gated_metric_is_not_judged() -> None:
    base = cell_info()
    base.metrics, base.rounds, base.kv, base.telemetry = {"completed": 16}, [{"completed": 16}], {}, {}
    verdict = compare_cell("c", base, cell_info())
    assert verdict.verdict is Verdict.NOT_JUDGED and not verdict.metrics


@pytest.mark.parametrize(("section", "key", "value"), [
    ("metrics", "output_throughput", "NaN"),
    ("metrics", "p99_e2el_ms", "-Infinity"),
    ("metrics", "request_throughput", "-1.5"),
    ("rounds", "p99_ttft_ms", "Infinity"),
    ("kv", "bytes_per_token_measured", "-2048"),
    ("telemetry", "cell_peak_rss_bytes", "NaN"),
])
def test_a_baseline_with_a_bad_number_is_refused_on_read_naming_cell_and_metric(
        tmp_path: Path, section: str, key: str, value: str) -> None:
    path = results_file(tmp_path / "r.json", [cell_info()])
    data = json.loads(path.read_text())
    info = data["benchmarks"][0]["extra_info"]
    target = info["rounds"][1] if section == "rounds" else info[section]
    target[key] = "@@"
    path.write_text(json.dumps(data).replace('"@@"', value))
    with pytest.raises(ResultsError) as exc:
        load_run(path)
    message = str(exc.value)
    assert "cpu-tiny-qwen2-hf-static-bs4-p64-c8" in message and key in message
    assert "finite number >= 0" in message


def test_a_bad_number_is_refused_on_write(tmp_path: Path) -> None:
    bad = cell_info()
    bad.metrics["p99_e2el_ms"] = math.nan
    entry = {"fullname": "t::test_cell[x]", "name": "test_cell[x]", "extra_info": bad.to_dict()}
    with pytest.raises(ResultsError, match=r"out.json: t::test_cell\[x\].*metrics.p99_e2el_ms"):
        write_results(tmp_path / "out.json", {}, [entry])
    assert not (tmp_path / "out.json").exists()
    with pytest.raises(ResultsError, match="p99_e2el_ms"):
        write_baseline(tmp_path / "b", {}, [entry], CPU_FP, {"id": "x"})
    assert not (tmp_path / "b" / "baseline.json").exists()


# --- properties: random baselines, through the gate and through the store ---------------------------

bad_numbers = st.sampled_from([math.nan, math.inf, -math.inf, -1.0, -1e-9, 0.0])
any_numbers = st.one_of(bad_numbers, st.floats(1e-6, 1e9), st.floats(allow_nan=True, allow_infinity=True))


@st.composite
def random_baselines(draw: st.DrawFn) -> CellRecord:
    """A cell record as a careless edit or a buggy writer could leave it, built past from_dict's checks."""
    base = cell_info(tier=draw(st.sampled_from(["cpu", "gpu"])), spread=draw(st.floats(0.0, 0.95)))
    n_rounds = draw(st.integers(1, 6))
    base.rounds = [dict(base.rounds[i % len(base.rounds)]) for i in range(n_rounds)]
    for rule in (GATED[i] for i in draw(st.lists(st.integers(0, len(GATED) - 1), max_size=4, unique=True))):
        section, _, name = rule.path.partition(".")
        target = getattr(base, section)
        if rule.per_tenant:  # one block per tenant: the number goes into tenant "chat"'s
            target = target.setdefault("chat", {})
        if section == "capacity" and not target:  # written whole by `batchperf capacity` (a part is refused on read)
            target.update(max_load=2.0, bracket_high=4.0, max_request_rate=8.0, attainment_at_max_load=0.95)
        if draw(st.booleans()) and section != "capacity":
            target.pop(name, None)
        else:
            target[name] = draw(any_numbers)
        if section == "metrics" and draw(st.booleans()):
            base.rounds[draw(st.integers(0, n_rounds - 1))][name] = draw(any_numbers)
    return base


def unjudged(verdict_metrics: list) -> list:
    return [m for m in verdict_metrics if m.verdict in (Verdict.NOT_JUDGED, Verdict.INCONCLUSIVE)]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(base=random_baselines(), slowdown=st.floats(0.05, 20.0), k=st.floats(0.0, 6.0))
def test_the_gate_never_passes_a_cell_it_did_not_judge(base: CellRecord, slowdown: float, k: float) -> None:
    verdict = compare_cell("c", base, scaled(cell_info(tier=base.tier), slowdown), GateConfig(k=k))
    assert verdict.verdict is not Verdict.NO_BASELINE
    judged = [m for m in verdict.metrics if m.verdict in (Verdict.NO_CHANGE, Verdict.IMPROVEMENT, Verdict.REGRESSION,
                                                          Verdict.FAILED)]
    if verdict.verdict in (Verdict.NO_CHANGE, Verdict.IMPROVEMENT):  # a reported metric (GPU P99s) does not decide
        deciding = [m for m in verdict.metrics if m.deciding]
        assert judged and not unjudged(deciding), "a pass with an unjudged deciding metric"
    for m in judged:  # every judged metric compared real numbers against a real, bounded tolerance
        assert math.isfinite(m.reference) and m.reference >= 0
        assert math.isfinite(m.tolerance) and m.tolerance >= 0
    for rule in GATED:
        section, _, name = rule.path.partition(".")
        block = getattr(base, section).get("chat", {}) if rule.per_tenant else getattr(base, section)
        raw = block.get(name)
        if raw is not None and not (math.isfinite(raw) and raw >= 0) and rule.judged_on(base.tier):
            shown = f"{rule.path}[chat]" if rule.per_tenant else rule.path
            got = next(m for m in verdict.metrics if m.metric == shown)
            assert got.verdict is Verdict.NOT_JUDGED, (rule.path, raw, got)
    tput = next((m for m in verdict.metrics if m.metric == TPUT.path), None)
    if tput is not None and tput.verdict is Verdict.NO_CHANGE:
        assert tput.tolerance <= max(TPUT.cap(base.tier), TPUT.floor(base.tier)) + 1e-12


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(base=random_baselines())
def test_the_store_refuses_what_the_gate_could_not_judge(tmp_path: Path, base: CellRecord) -> None:
    blocks = (*(getattr(base, section) for section in MEASURED), *base.tenants.values(), *base.rounds)
    numbers = [v for block in blocks for v in block.values() if isinstance(v, float)]
    bad = any(not (math.isfinite(v) and v >= 0) for v in numbers) or any(  # a fraction counter above 1 too
        fraction_problem(k, v) for k, v in base.counters.items() if isinstance(v, float) and math.isfinite(v))
    entry = {"fullname": "t::test_cell[c]", "name": "test_cell[c]", "extra_info": base.to_dict()}
    folder = tmp_path / "b"
    if bad:
        with pytest.raises(ResultsError, match="finite number >= 0|a fraction of a whole"):
            write_baseline(folder, {"machine_info": {}}, [entry], CPU_FP, {"id": "x"})
        path = tmp_path / "raw.json"  # a hand-edited file on disk: refused on read, never half-trusted
        path.write_text(json.dumps({"machine_info": {}, "benchmarks": [entry],
                                    "batchperf_baseline": {"schema": 1, "fingerprint": CPU_FP.to_dict()}}))
        with pytest.raises(ResultsError, match="finite number >= 0|a fraction of a whole"):
            load_baseline(path)
    else:
        write_baseline(folder, {"machine_info": {}}, [entry], CPU_FP, {"id": "x"})
        stored = load_baseline(folder / "baseline.json")
        verdict = compare_cell("c", next(iter(stored.cells.values())), copied(cell_info(tier=base.tier)))
        deciding = [m for m in verdict.metrics if m.deciding]
        assert verdict.verdict is not Verdict.NO_CHANGE or not unjudged(deciding)
