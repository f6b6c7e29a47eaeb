"""Issue 38: every number a trace or tenants file holds is bounded and refused by name (no traceback from a cell),
only the tokens a prompt uses are made, and a schedule longer than a cell's time limit is refused before it starts."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from batchperf.workload.replay import TraceError, read_jsonl, read_trace
from batchperf.workload.spec import LengthSpec, WorkloadSpec
from batchperf.workload.synth import TokenSynth
from batchperf.workload.traffic import parse_workload

BASE = WorkloadSpec(num_prompts=8, prompt_len=LengthSpec(16, 16))


def trace(path: Path, *rows: dict) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def tenants(path: Path, body: str) -> Path:
    path.write_text(body)
    return path


ROW = {"timestamp": 0, "input_length": 8, "output_length": 2}


# --- defect 1: values that passed the reader and crashed the cell -------------------------------------------------

@pytest.mark.parametrize(("text", "match"), [
    ('{"timestamp": ' + "9" * 400 + ', "input_length": 8, "output_length": 2}',
     r"line 1: field timestamp is a 400-digit number; .*a timestamp within a century"),
    ('{"timestamp": 0, "input_length": ' + "9" * 400 + ', "output_length": 2}',
     r"line 1: field input_length is a 400-digit number; .*within any model's context"),
    ('{"timestamp": 0, "input_length": 99999999999, "output_length": 2}', r"field input_length .*at most 16,777,216"),
    ('{"timestamp": 4e12, "input_length": 8, "output_length": 2}', r"field timestamp is 4000000000000.0; .*century"),
    ('{"timestamp": 0, "input_length": 8, "output_length": 2, "hash_ids": ' + "[" * 100_000 + "]" * 100_000 + "}",
     r"line 1: nested too deep"),
    ('{"timestamp": 0, "input_length": 8, "output_length": 2, "hash_ids": [' + "9" * 5000 + "]}",
     r"line 1: a number too long to read"),
    ('{"timestamp": 0, "input_length": 8, "output_length": 2, "hash_ids": [' + "9" * 30 + "]}",
     r"line 1: field hash_ids holds .*within 64 bits"),
    ('{"timestamp": 0, "input_length": 8, "output_length": 2, "priority": ' + "9" * 400 + "}",
     r"line 1: field priority .*within 32 bits"),
])
def test_a_number_beyond_its_bound_is_refused_with_the_bound(text: str, match: str) -> None:
    with pytest.raises(TraceError, match=match):
        list(read_jsonl([text], block_size=16))


@pytest.mark.parametrize(("field", "match"), [
    ("requests = 1000000000000", r"tenant 'a': requests is 1000000000000; .*requests within what memory holds"),
    ("on_s = 1e-320\noff_s = 1", r"tenant 'a': on_s is 1e-320; it must be a finite number >= 0.001"),
    ("off_s = 1e300\non_s = 1", r"tenant 'a': off_s is 1e\+300; .*within a cell's time limit"),
    ("priority = 99999999999", r"tenant 'a': priority .*within 32 bits"),
    ("burstiness = 1e-300", r"tenant 'a': burstiness is 1e-300"),
    ("output_lens = [99999999999]", r"tenant 'a': output_lens .*within any model's context"),
    ('slo = { ttft_ms = 1e300 }', r"tenant 'a': slo.ttft_ms .*an SLO within a cell's time limit"),
])
def test_a_tenants_number_beyond_its_bound_is_refused(tmp_path: Path, field: str, match: str) -> None:
    path = tenants(tmp_path / "t.toml", '[tenants.a]\nrate = 1.0\nprompt_len = 8\nrequests = 4\n'
                                        .replace("requests = 4\n", "" if field.startswith("requests") else "requests = 4\n")
                   + field + "\n")
    with pytest.raises(ValueError, match=match):
        parse_workload(f"tenants:{path}", BASE).build(1000, 512)


def test_prompt_tokens_beyond_memory_are_refused_before_any_is_made(tmp_path: Path) -> None:
    path = tenants(tmp_path / "t.toml", "[tenants.a]\nrequests = 900000\nrate = 1000.0\nprompt_len = 4000\n")
    started = time.monotonic()
    with pytest.raises(ValueError, match=r"up to 3,600,000,000 prompt tokens; .*requests within what memory holds"):
        parse_workload(f"tenants:{path}", BASE).build(1000, 8192)
    assert time.monotonic() - started < 5


# --- defect 2: block=N made the whole block per id ------------------------------------------------------------------

def test_only_the_tokens_a_prompt_uses_are_made_whatever_the_block() -> None:
    synth = TokenSynth(0, 1000, block_size=10**7)
    started = time.monotonic()
    (row,) = read_jsonl([json.dumps({**ROW, "hash_ids": [3]})], block_size=10**7)
    prompt = synth.prompt(row)
    assert len(prompt) == 8 and time.monotonic() - started < 0.5
    assert synth.block(3, 8) == prompt  # equal ids, equal tokens


def test_a_block_is_the_same_tokens_whatever_prompt_drew_it_first() -> None:
    short, long = (TokenSynth(0, 1000, block_size=16) for _ in range(2))
    assert long.block(5, 16)[:3] == short.block(5, 3)
    assert short.block(5, 16) == long.block(5, 16)


@pytest.mark.parametrize(("block", "match"), [("10000000000", "block=10000000000 must be a whole number of tokens "
                                                               "from 1 to 16,777,216"),
                                              ("1e7", "block=1e7 must be a whole number"), ("²", "block=²")])
def test_a_block_beyond_any_context_is_refused(tmp_path: Path, block: str, match: str) -> None:
    path = trace(tmp_path / "t.jsonl", ROW)
    with pytest.raises(ValueError, match=match):
        parse_workload(f"trace:{path}:block={block}", BASE)


# --- defect 3: extreme load, speed or rate -----------------------------------------------------------------------

def test_a_speed_and_load_below_a_float_is_refused_not_divided_by(tmp_path: Path) -> None:
    path = trace(tmp_path / "t.jsonl", ROW, {**ROW, "timestamp": 1000})
    with pytest.raises(ValueError, match=r"speed x load = 1e-200 x 1e-200 is below what a float holds"):
        parse_workload(f"trace:{path}:speed=1e-200", BASE, load=1e-200).build(1000, 512)


def test_a_trace_schedule_past_the_cell_time_limit_is_refused_naming_its_length(tmp_path: Path) -> None:
    path = trace(tmp_path / "t.jsonl", ROW, {**ROW, "timestamp": 1000})
    with pytest.raises(ValueError, match=r"its schedule is 3.17e\+292 years long, beyond a cell's time limit of 24 h"):
        parse_workload(f"trace:{path}", BASE, load=1e-300).build(1000, 512)


def test_a_tenant_rate_that_would_wait_years_is_refused_naming_the_length(tmp_path: Path) -> None:
    path = tenants(tmp_path / "t.toml", "[tenants.a]\nrequests = 3\nrate = 1e-9\nprompt_len = 8\n")
    with pytest.raises(ValueError, match=r"its schedule is \d+(\.\d+)? years long, beyond a cell's time limit"):
        parse_workload(f"tenants:{path}", BASE).build(1000, 512)


def test_a_rate_arrival_at_a_vanishing_load_is_refused(tmp_path: Path) -> None:
    from batchperf.workload.spec import Arrival

    spec = WorkloadSpec(num_prompts=4, prompt_len=LengthSpec(8, 8), arrival=Arrival("rate", 1.0))
    with pytest.raises(ValueError, match="beyond a cell's time limit"):
        parse_workload("synthetic", spec, load=1e-300).build(1000, 512)


# --- defect 5 and the readers' minors ------------------------------------------------------------------------------

def test_a_tenant_with_a_lone_surrogate_is_refused_when_read() -> None:
    with pytest.raises(TraceError, match=r"line 1: field tenant .* holds a lone surrogate"):
        list(read_jsonl(['{"timestamp": 0, "input_length": 8, "output_length": 2, "tenant": "\\ud800"}']))


def test_a_non_utf8_trace_names_the_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(json.dumps(ROW).encode() + b'\n{"timestamp": 1, "input_length": 8, "output_length": 2, '
                     b'"tenant": "caf\xe9"}\n')
    with pytest.raises(TraceError, match=rf"{path} line 2: byte 0xe9 at column \d+ is not UTF-8"):
        list(read_trace(path))


def test_a_bom_does_not_hide_a_burstgpt_csv_first_column(tmp_path: Path) -> None:
    path = tmp_path / "b.csv"
    path.write_bytes(b"\xef\xbb\xbfTimestamp,Model,Request tokens,Response tokens\r\n0.5,x,8,2\r\n")
    (row,) = read_trace(path)
    assert (row.timestamp_s, row.input_length, row.output_length) == (0.5, 8, 2)


def test_a_symlinked_trace_is_named_for_its_file(tmp_path: Path) -> None:
    real = trace(tmp_path / "real_trace.jsonl", ROW)
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    assert parse_workload(f"trace:{link}", BASE).label == parse_workload(f"trace:{real}", BASE).label
    assert "real_trace" in parse_workload(f"trace:{link}", BASE).label


def test_a_repeated_trace_option_is_refused(tmp_path: Path) -> None:
    path = trace(tmp_path / "t.jsonl", ROW)
    with pytest.raises(ValueError, match=r"option speed given twice \(speed=2 and speed=3\)"):
        parse_workload(f"trace:{path}:speed=2:speed=3", BASE)


@pytest.mark.parametrize(("window", "match"), [
    ("1.2.3-5", r"window start '1.2.3' must be a number of seconds"), ("5", r"window=5 must be A-B seconds"),
    ("0-inf", r"window end 'inf' must be a number of seconds from 0 to .*century"),
])
def test_a_window_parse_error_is_said_in_our_words(tmp_path: Path, window: str, match: str) -> None:
    path = trace(tmp_path / "t.jsonl", ROW)
    with pytest.raises(ValueError, match=match) as info:
        parse_workload(f"trace:{path}:window={window}", BASE)
    assert "could not convert" not in str(info.value)


def test_two_replays_of_one_file_are_two_labels(tmp_path: Path) -> None:
    path = trace(tmp_path / "t.jsonl", ROW)
    labels = {parse_workload(f"trace:{path}{o}", BASE).label for o in ("", ":speed=2", ":window=0-5", ":block=16")}
    assert len(labels) == 4
    assert parse_workload(f"trace:{path}", BASE).label.endswith(parse_workload(f"trace:{path}", BASE).file_hash[:8])


@pytest.mark.parametrize("name", ['""', '" "'])
def test_a_tenant_named_blank_is_refused(tmp_path: Path, name: str) -> None:
    path = tenants(tmp_path / "t.toml", f"[tenants.{name}]\nrequests = 2\nrate = 1.0\nprompt_len = 8\n")
    with pytest.raises(ValueError, match=r"a tenant named .*; name each tenant with some text"):
        parse_workload(f"tenants:{path}", BASE).build(1000, 512)


@pytest.mark.parametrize("priority", [-2**31, 2**31 - 1])
def test_a_tenants_priority_takes_every_32_bit_value_a_trace_takes(tmp_path: Path, priority: int) -> None:
    # issue 59: the tenants file refused -2**31, which the trace reader and docs/traffic.md accept
    row = {**ROW, "priority": priority}
    assert [r.priority for r in read_jsonl([json.dumps(row)], block_size=16)] == [priority]
    path = tenants(tmp_path / "t.toml", f"[tenants.a]\nrate = 1.0\nprompt_len = 8\nrequests = 2\n"
                                        f"priority = {priority}\n")
    w = parse_workload(f"tenants:{path}", BASE).build(1000, 512)
    assert {r.priority for r in w.requests} == {priority}


@pytest.mark.parametrize(("field", "said"), [
    ("priority = 2147483648", "it must be a whole number >= -2,147,483,648 and at most 2,147,483,647 (a priority"),
    ("priority = -2147483649", "it must be a whole number >= -2,147,483,648 and at most 2,147,483,647 (a priority"),
    ('slo = { ttft_ms = 1e300 }', "and at most 86,400,000 (an SLO within a cell's time limit)"),
    ("burstiness = 1e-300", "it must be a finite number >= 0.001 and at most 1,000 (a gamma shape"),
])
def test_a_tenants_bound_is_printed_exactly(tmp_path: Path, field: str, said: str) -> None:
    # issue 59: %g printed 2**31 - 1 as 2.14748e+09, a limit nobody can check a value against
    path = tenants(tmp_path / "t.toml", f"[tenants.a]\nrate = 1.0\nprompt_len = 8\nrequests = 2\n{field}\n")
    with pytest.raises(ValueError) as refused:
        parse_workload(f"tenants:{path}", BASE).build(1000, 512)
    assert said in str(refused.value)


def test_a_traces_timestamp_bound_is_printed_exactly() -> None:
    with pytest.raises(TraceError, match=r"from 0 to 3,155,760,000,000 \(ms\)"):
        list(read_jsonl(['{"timestamp": 4e12, "input_length": 8, "output_length": 2}'], block_size=16))
