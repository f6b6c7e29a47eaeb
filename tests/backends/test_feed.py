"""The client-side feed: concurrency limit, FIFO order, arrival times."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchperf.backends.feed import RequestFeed
from batchperf.workload.spec import RequestSpec


def specs(offsets: list[float]) -> list[RequestSpec]:
    return [RequestSpec(i, (1, 2), 1, off) for i, off in enumerate(offsets)]


def test_closed_loop_sends_a_new_request_as_each_finishes() -> None:
    feed = RequestFeed(specs([0.0] * 4), max_in_flight=2)
    assert [(r.request_id, at) for r, at in feed.poll(0.0)] == [(0, 0.0), (1, 0.0)]
    assert feed.poll(5.0) == []  # nothing completes, nothing is sent
    feed.complete(1, at=0.7)
    assert [(r.request_id, at) for r, at in feed.poll(1.0)] == [(2, 0.7)]  # sent when the slot freed
    assert feed.next_release() is None


def test_open_loop_waits_for_the_scheduled_time() -> None:
    feed = RequestFeed(specs([0.0, 0.5]), max_in_flight=8)
    assert len(feed.poll(0.1)) == 1
    assert feed.next_release() == 0.5
    assert [at for _, at in feed.poll(0.9)] == [0.5]


@settings(max_examples=50, deadline=None)
@given(n=st.integers(1, 30), limit=st.integers(1, 8), durations=st.lists(st.floats(0.01, 1.0), min_size=30, max_size=30))
def test_never_more_in_flight_than_the_limit(n: int, limit: int, durations: list[float]) -> None:
    feed = RequestFeed(specs([0.0] * n), max_in_flight=limit)
    now, running, sent = 0.0, {}, []
    while not feed.done:
        for r, at in feed.poll(now):
            running[r.request_id] = at + durations[r.request_id]
            sent.append(r.request_id)
        assert feed.in_flight <= limit
        rid = min(running, key=running.get)
        now = running.pop(rid)
        feed.complete(rid, now)
    assert sent == list(range(n))


def test_bad_limit_is_rejected() -> None:
    with pytest.raises(ValueError, match="concurrency"):
        RequestFeed([], 0)
