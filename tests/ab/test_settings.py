"""The settings of one ``batchperf ab`` run (``batchperf.ab.settings``): refused when they cannot give an answer,
every problem named with its fix at once (exit 3); the rounds a user gave, and the arguments of a process."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchperf.ab.env import Environment
from batchperf.ab.settings import Settings, UsageProblem, per_tenant_name
from batchperf.ab.stats import DEFAULT_TEST


def settings(**kwargs: object) -> Settings:
    base = {"a": Environment("A", Path("/py/a")), "b": Environment("B", Path("/py/b")), "pytest_args": ("-m", "cpu"),
            "out": Path("/tmp/ab")}
    return Settings(**{**base, **kwargs})  # type: ignore[arg-type]


def test_the_defaults_decide_on_throughput_alone_at_alpha_5_percent() -> None:
    s = settings()
    assert s.metrics == ("output_throughput",) and s.alpha == 0.05 and s.margin == 0.03 and s.max_pairs == 30
    assert s.test == DEFAULT_TEST == "signed-rank" and s.design == "auto" and s.warmup and s.rounds is None


@pytest.mark.parametrize("kwargs, message", [
    ({"max_pairs": 0}, "a budget of zero pairs measures nothing"),
    ({"max_pairs": 100_000}, "--max-pairs 100000: at most 100"),
    ({"max_minutes": 0.0}, "a budget of zero minutes measures nothing"),
    ({"process_minutes": -1.0}, "--process-minutes -1.0: must be more than 0"),
    ({"metrics": ("tokens_per_joule",)}, "unknown metric(s) tokens_per_joule"),
    ({"metrics": ()}, "--metrics names no metric"),
    ({"margins": {"p99_ttft_ms": 1.0}}, "--margin p99_ttft_ms=1.0: must be a fraction in [0, 1)"),
    ({"margin": 1.5}, "--margin 1.5"),
    ({"alpha": 0.0}, "--alpha 0.0: must be between 0 and 1"),
    ({"test": "bayes"}, "--test bayes: unknown; give one of signed-rank, t"),
    ({"design": "bogus"}, "--design bogus: unknown; give one of auto, sequential, resident, duet"),
    ({"rounds": 0}, "--rounds 0: must be >= 1"),
    ({"restart_servers_every": 0}, "--restart-servers-every 0: must be a whole number of pairs >= 1"),
    ({"restart_servers_every": 2.5}, "--restart-servers-every 2.5: must be a whole number of pairs >= 1"),
    ({"restart_servers_every": True}, "--restart-servers-every True: must be a whole number of pairs >= 1"),
])
def test_settings_that_cannot_give_an_answer_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(UsageProblem) as caught:
        settings(**kwargs)
    assert message in str(caught.value)


def test_every_problem_is_named_at_once() -> None:
    with pytest.raises(UsageProblem) as caught:
        settings(alpha=2.0, rounds=0)
    assert str(caught.value) == "--alpha 2.0: must be between 0 and 1; --rounds 0: must be >= 1"


def test_a_per_tenant_series_is_a_known_metric_with_a_tenant() -> None:
    assert per_tenant_name("p99_ttft_ms[interactive]")
    assert not per_tenant_name("p99_ttft_ms[]") and not per_tenant_name("p99_ttft_ms")
    assert not per_tenant_name("p99_e2el_ms[interactive]")  # not a per-tenant metric ab follows
    assert settings(metrics=("p99_ttft_ms[interactive]",)).metrics == ("p99_ttft_ms[interactive]",)


def test_a_metric_s_margin_is_its_own_or_the_run_s() -> None:
    s = settings(margin=0.05, margins={"p99_ttft_ms": 0.1})
    assert s.margin_of("p99_ttft_ms") == 0.1 and s.margin_of("output_throughput") == 0.05


def test_a_process_may_run_as_long_as_the_run_unless_told() -> None:
    assert settings(max_minutes=30.0).process_timeout_s == 1800.0
    assert settings(max_minutes=30.0, process_minutes=2.5).process_timeout_s == 150.0
    assert settings(max_minutes=None).process_timeout_s is None


@pytest.mark.parametrize("pytest_args, rounds, given", [
    (("-m", "cpu"), None, None),
    (("-m", "cpu"), 7, 7),
    (("--batchperf-rounds=3",), 7, 3),  # the pytest arguments win
    (("--batchperf-rounds", "4"), None, 4),
    (("--batchperf-rounds",), 7, 7),  # no value after it: --rounds
    (("--batchperf-rounds=many",), None, None),
])
def test_the_rounds_a_user_gave(pytest_args: tuple[str, ...], rounds: int | None, given: int | None) -> None:
    assert settings(pytest_args=pytest_args, rounds=rounds).given_rounds == given


def test_a_process_measures_the_rounds_asked_unless_the_pytest_arguments_say() -> None:
    s = settings()
    assert s.run_args(5) == ["-m", "cpu", "--batchperf-rounds=5", "--batchperf-progress=off"]
    assert s.run_args(None) == ["-m", "cpu", "--batchperf-progress=off"]
    given = settings(pytest_args=("--batchperf-rounds=3",))
    assert given.run_args(5) == ["--batchperf-rounds=3", "--batchperf-progress=off"]
