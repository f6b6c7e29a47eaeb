"""Workload kinds: shared prefixes with their expected hit rate, trace replay, tenants, and every bad input refused."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from batchperf.workload.spec import Arrival, LengthSpec, WorkloadSpec
from batchperf.workload.traffic import parse_load, parse_workload

BASE = WorkloadSpec(num_prompts=8, prompt_len=LengthSpec(16, 16), output_lens=(2,), num_warmup=1)


def write(path: Path, *rows: dict) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_prefix_requests_share_their_group_prompt_and_the_expected_rate_is_computed() -> None:
    w = parse_workload("prefix:2:32", BASE).build(1000, 512)
    first, third, second = w.requests[0].prompt_ids, w.requests[2].prompt_ids, w.requests[1].prompt_ids
    assert first[:32] == third[:32] and first[:32] != second[:32] and first[32:] != third[32:]
    assert w.expected_prefix_hit_rate == pytest.approx((8 - 2) * 32 / (8 * 48))
    assert all(r.prompt_ids[:32] not in (first[:32], second[:32]) for r in w.warmup)  # warm-up primes no cache


def test_trace_replay_keeps_lengths_times_tenants_and_equal_hash_ids_give_equal_blocks(tmp_path: Path) -> None:
    path = write(tmp_path / "t.jsonl",
                 {"timestamp": 1000, "input_length": 20, "output_length": 3, "hash_ids": [5, 6], "tenant": "a"},
                 {"timestamp": 1500, "input_length": 24, "output_length": 2, "hash_ids": [5, 7], "priority": 1},
                 {"timestamp": 3000, "input_length": 16, "output_length": 2, "hash_ids": [8]})
    w = parse_workload(f"trace:{path}:speed=2:block=16", BASE).build(1000, 512)
    a, b, c = w.requests
    assert [r.prompt_len for r in w.requests] == [20, 24, 16] and [r.target_len for r in w.requests] == [3, 2, 2]
    assert [r.offset for r in w.requests] == [0.0, 0.25, 1.0]  # rebased to the first line, twice as fast
    assert a.prompt_ids[:16] == b.prompt_ids[:16] and a.prompt_ids[16:] != b.prompt_ids[16:20]
    assert c.prompt_ids != a.prompt_ids[:16]
    assert (a.tenant, b.priority) == ("a", 1) and w.open_loop and w.kind == "trace" and len(w.file_hash) == 16
    assert w.expected_prefix_hit_rate == pytest.approx(16 / 60)
    again = parse_workload(f"trace:{path}:speed=2:block=16", BASE).build(1000, 512)
    assert again.requests == w.requests  # seeded: the same tokens every time


def test_a_trace_window_and_a_load_factor(tmp_path: Path) -> None:
    path = write(tmp_path / "t.jsonl", *({"timestamp": 1000 * i, "input_length": 4, "output_length": 1}
                                         for i in range(10)))
    w = parse_workload(f"trace:{path}:window=2-5", BASE, load=2.0).build(1000, 512)
    assert [r.offset for r in w.requests] == [0.0, 0.5, 1.0] and w.load == 2.0


def test_an_empty_trace_or_window_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="the trace has no requests; nothing to replay"):
        parse_workload(f"trace:{empty}", BASE).build(1000, 512)
    one = write(tmp_path / "one.jsonl", {"timestamp": 0, "input_length": 4, "output_length": 1})
    with pytest.raises(ValueError, match="no requests in window 5-6 s"):
        parse_workload(f"trace:{one}:window=5-6", BASE).build(1000, 512)


def test_a_request_beyond_the_context_fails_the_cell_naming_the_line(tmp_path: Path) -> None:
    path = write(tmp_path / "t.jsonl", {"timestamp": 0, "input_length": 4, "output_length": 1},
                 {"timestamp": 1, "input_length": 500, "output_length": 20})
    with pytest.raises(ValueError, match=r"t.jsonl line 2: prompt of 500 \+ 20 output tokens = 520 exceeds the "
                                         r"model's context of 512"):
        parse_workload(f"trace:{path}", BASE).build(1000, 512)


@pytest.mark.parametrize(("text", "match"), [
    ("prefix:2", "use prefix:GROUPS:PREFIX_LEN"), ("prefix:0:16", "use prefix:GROUPS:PREFIX_LEN"),
    ("trace:", "name the file"), ("trace:/nope.jsonl", "no file /nope.jsonl"), ("zipf:3", "unknown workload"),
])
def test_a_bad_workload_entry_names_the_problem(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_workload(text, BASE)


def test_bad_trace_options_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "t.jsonl", {"timestamp": 0, "input_length": 4, "output_length": 1})
    for opts, match in ((":speed=0", "speed '0' must be a finite number > 0"), (":speed=nan", "speed 'nan'"),
                        (":window=5-2", "window=5-2 must be A-B"), (":block=0", "block=0"), (":pace=2", "option")):
        with pytest.raises(ValueError, match=match):
            parse_workload(f"trace:{path}{opts}", BASE)


@pytest.mark.parametrize("text", ["0", "-1", "inf", "nan", "x", ""])
def test_a_load_factor_must_be_a_positive_finite_number(text: str) -> None:
    with pytest.raises(ValueError, match=f"invalid load factor {text!r}: must be a finite number > 0"):
        parse_load(text)


def test_load_scales_a_rate_arrival_and_is_refused_for_a_closed_one() -> None:
    rate = WorkloadSpec(num_prompts=8, prompt_len=LengthSpec(4, 4), arrival=Arrival("rate", 2.0))
    slow, fast = (parse_workload("synthetic", rate, load=x).build(1000, 512) for x in (1.0, 2.0))
    assert fast.requests[-1].offset == pytest.approx(slow.requests[-1].offset / 2) and fast.load == 2.0
    with pytest.raises(ValueError, match="a closed arrival has no offered load to scale"):
        parse_workload("synthetic", BASE, load=1.5).build(1000, 512)
    assert math.isclose(parse_load("1.5"), 1.5)
