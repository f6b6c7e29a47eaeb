"""Reading a trace: every bad line is refused naming the line and the field; a long trace streams in bounded memory."""

from __future__ import annotations

import json
import tracemalloc

import pytest

from batchperf.workload.replay import TraceError, read_csv, read_jsonl


def line(**fields: object) -> str:
    return json.dumps({"timestamp": 0, "input_length": 10, "output_length": 2, **fields})


def test_a_good_line_is_read_in_seconds_with_its_optional_fields() -> None:
    rows = list(read_jsonl([line(timestamp=1500, hash_ids=[7], tenant="a", priority=2)], block_size=16))
    assert rows[0].timestamp_s == 1.5 and rows[0].hash_ids == (7,) and rows[0].tenant == "a" and rows[0].priority == 2


@pytest.mark.parametrize(("text", "match"), [
    ("{not json", r"trace line 1: not JSON"),
    ("[1, 2]", r"line 1: a line must be a JSON object"),
    (json.dumps({"timestamp": 0, "output_length": 2}), r"line 1: field input_length is missing"),
    (line(input_length="ten"), r"line 1: field input_length is 'ten'"),
    (line(input_length=0), r"line 1: field input_length is 0; a length must be a whole number of tokens >= 1"),
    (line(output_length=-3), r"line 1: field output_length is -3"),
    (line(input_length=2.5), r"field input_length is 2.5"),
    (line(timestamp=-1), r"field timestamp is -1"),
    (line(tenant=""), r"field tenant is ''"),
    (line(priority=1.5), r"field priority is 1.5"),
    (line(color="red"), r"line 1: unknown field\(s\) color"),
])
def test_a_malformed_line_names_the_line_and_the_field(text: str, match: str) -> None:
    with pytest.raises(TraceError, match=match):
        list(read_jsonl([text]))


def test_non_finite_lengths_are_refused() -> None:
    with pytest.raises(TraceError, match=r"line 1: field input_length is inf"):
        list(read_jsonl(['{"timestamp": 0, "input_length": Infinity, "output_length": 2}']))
    with pytest.raises(TraceError, match=r"line 1: field output_length is nan"):
        list(read_jsonl(['{"timestamp": 0, "input_length": 4, "output_length": NaN}']))


def test_the_error_names_the_right_line_after_good_ones() -> None:
    with pytest.raises(TraceError, match=r"trace line 3: field output_length"):
        list(read_jsonl([line(), "", line(output_length=0)]))


def test_timestamps_that_go_back_are_refused_not_sorted() -> None:
    with pytest.raises(TraceError, match=r"line 2: timestamp 5 ms is before the previous line's 10 ms.*sort"):
        list(read_jsonl([line(timestamp=10), line(timestamp=5)]))


def test_hash_ids_must_cover_the_prompt_exactly() -> None:
    with pytest.raises(TraceError, match=r"line 1: field hash_ids has 1 id\(s\) but input_length 40 needs exactly 3 "
                                         r"blocks of 16 tokens"):
        list(read_jsonl([line(input_length=40, hash_ids=[1])], block_size=16))
    with pytest.raises(TraceError, match=r"hash_ids has 4 id"):
        list(read_jsonl([line(input_length=40, hash_ids=[1, 2, 3, 4])], block_size=16))


def test_an_empty_trace_has_no_rows() -> None:
    assert list(read_jsonl(["", "\n"])) == []


def test_burstgpt_csv_columns_are_read_in_seconds() -> None:
    text = ["Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n",
            "0,ChatGPT,472,18,490,Conversation log\n", "2.5,GPT-4,1087,251,1338,API log\n"]
    rows = list(read_csv(text))
    assert [(r.timestamp_s, r.input_length, r.output_length) for r in rows] == [(0.0, 472, 18), (2.5, 1087, 251)]


def test_a_csv_without_burstgpt_columns_or_with_a_bad_cell_is_refused() -> None:
    with pytest.raises(TraceError, match=r"column\(s\) Response tokens missing"):
        list(read_csv(["Timestamp,Request tokens\n", "0,5\n"]))
    with pytest.raises(TraceError, match=r"line 2: field Response tokens is 0"):
        list(read_csv(["Timestamp,Request tokens,Response tokens\n", "0,5,0\n"]))


def peak_bytes_reading(n: int) -> int:
    """The peak of Python's allocations while ``read_jsonl`` reads ``n`` lines from a generator (nothing
    materialised), every row read and dropped."""
    lines = (f'{{"timestamp": {i}, "input_length": 8, "output_length": 2}}' for i in range(n))
    tracemalloc.start()
    try:
        count = sum(1 for _ in read_jsonl(lines))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == n
    return peak


def test_a_trace_streams_in_memory_that_does_not_grow_with_its_length() -> None:
    """Twenty times the lines, the same peak (a row kept per line would add ~200 bytes a line: 40 MiB at 200,000
    lines), and well under 1 MiB: a million-line trace reads as a 10,000-line one does."""
    small, large = peak_bytes_reading(10_000), peak_bytes_reading(200_000)
    assert large < 1 << 20, f"reading 200,000 lines peaked at {large} bytes"
    assert large - small < 64 << 10, f"the peak grew from {small} to {large} bytes with 190,000 more lines"
