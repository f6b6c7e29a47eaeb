"""The vllm-server client's threads run SCHED_FIFO while a run lasts (where allowed), so that a loaded machine does
not make it read late; without the privilege, or when turned off, it runs as before and the record says why."""

from __future__ import annotations

import os

import pytest
from fake_openai_server import fake_server

from batchperf.backends import create_backend, realtime, vllm_server
from batchperf.measure.client_lag import SCHEDULING
from batchperf.workload.spec import LengthSpec, WorkloadSpec

pytest.importorskip("aiohttp", reason="vllm-server's client needs aiohttp (the `vllm` extra)")


def can_raise() -> bool:
    previous, _ = realtime.raise_thread()
    realtime.restore_thread(previous)
    return previous is not None


def run_seeing_policies(tiny_model, monkeypatch: pytest.MonkeyPatch):
    """A small run on the fake server; the scheduling policy each request's task saw on the loop's thread."""
    seen: list[int] = []
    real = vllm_server._request

    async def recording(*args, **kwargs):
        seen.append(os.sched_getscheduler(0) & ~os.SCHED_RESET_ON_FORK)
        return await real(*args, **kwargs)

    monkeypatch.setattr(vllm_server, "_request", recording)
    workload = WorkloadSpec(num_prompts=3, prompt_len=LengthSpec.parse("8"), output_lens=(3,)).build(1000, 4096)
    with fake_server(root=str(tiny_model.path)) as server:
        trace = create_backend("vllm-server", tiny_model, server_url=f"2={server.url}").run(workload, 2, 2)
    return trace, seen


@pytest.mark.skipif(not can_raise(), reason="SCHED_FIFO needs CAP_SYS_NICE (root) here")
def test_the_client_reads_under_sched_fifo_and_gives_it_back(tiny_model, monkeypatch: pytest.MonkeyPatch) -> None:
    before = os.sched_getscheduler(0)
    trace, seen = run_seeing_policies(tiny_model, monkeypatch)
    assert seen == [os.SCHED_FIFO] * 3
    assert trace.client[SCHEDULING] == "SCHED_FIFO priority 1"
    assert os.sched_getscheduler(0) == before  # the suite's thread is back to what it was


def test_without_the_privilege_the_client_runs_as_before_and_says_why(tiny_model,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    trace, seen = run_seeing_policies(tiny_model, monkeypatch)
    assert seen == [os.SCHED_OTHER] * 3 and [r.error for r in trace.requests] == [None] * 3
    assert trace.client[SCHEDULING].startswith("normal scheduling (SCHED_FIFO needs CAP_SYS_NICE")


def test_it_can_be_turned_off(tiny_model, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(realtime.ENV, "0")
    trace, seen = run_seeing_policies(tiny_model, monkeypatch)
    assert seen == [os.SCHED_OTHER] * 3
    assert trace.client[SCHEDULING] == "normal scheduling ($BATCHPERF_CLIENT_REALTIME=0)"
