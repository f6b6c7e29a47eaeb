"""`batchperf chain` resumed from what an earlier run left: a folder from before the chain's alpha was split over its
runs (issue 56) is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from batchperf.ab.settings import UsageProblem
from batchperf.releases.chain import LOCK, run_chain
from tests.releases.test_chain import LABELS, base, envs, fake_ab, ok


def files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file() and p.name != LOCK}


@pytest.mark.parametrize(("step_alpha", "said"), [
    (None, "the whole alpha 0.05 (it was written before a chain split its alpha over its runs)"),
    (0.025, "alpha 0.025"),  # a hand edit
])
def test_a_chain_judged_at_another_alpha_is_refused_naming_the_folder_and_a_new_out(tmp_path: Path,
                                                                                  step_alpha: float | None,
                                                                                  said: str) -> None:
    """Before, a folder from before the split resumed silently: its finished steps, each judged at the whole alpha,
    stood beside new ones judged at alpha / runs, and chain.json called them all judged at the split."""
    out = tmp_path / "chain"
    run_chain(envs(3), LABELS[:3], base(out, 3), fake_ab([1.0, 1.0, 1.0], [], interrupt=(1, 2)), check=ok)
    data = json.loads((out / "chain.json").read_text())
    if step_alpha is None:
        del data["step_alpha"]  # as chain.json was written before issue 56
    else:
        data["step_alpha"] = step_alpha
    (out / "chain.json").write_text(json.dumps(data, indent=1) + "\n")
    before = files(out)
    calls: list[tuple[int, int]] = []
    with pytest.raises(UsageProblem) as refused:
        run_chain(envs(3), LABELS[:3], base(out, 3), fake_ab([1.0, 1.0, 1.0], calls), check=ok)
    assert str(refused.value).startswith(f"--out {out}: the same chain, but each of its runs was judged at {said}; "
                                         "this chain judges each at 0.05 / 3 runs = 0.01667")
    assert "Give a new --out" in str(refused.value) and f"`batchperf report {out}` still draws it" in str(refused.value)
    assert calls == [] and files(out) == before  # nothing run, nothing moved to discarded/, nothing rewritten


def test_a_two_release_chain_from_before_the_split_resumes_its_one_run_was_at_the_whole_alpha_then_too(
        tmp_path: Path) -> None:
    out = tmp_path / "chain"
    run_chain(envs(2), LABELS[:2], base(out, 2), fake_ab([1.0, 1.0], []), check=ok)
    data = json.loads((out / "chain.json").read_text())
    del data["step_alpha"]
    (out / "chain.json").write_text(json.dumps(data))
    calls: list[tuple[int, int]] = []
    assert run_chain(envs(2), LABELS[:2], base(out, 2), fake_ab([1.0, 1.0], calls), check=ok).status == "done"
    assert calls == [] and json.loads((out / "chain.json").read_text())["step_alpha"] == 0.05


def test_a_chain_of_this_alpha_resumes_as_before(tmp_path: Path) -> None:
    out = tmp_path / "chain"
    run_chain(envs(3), LABELS[:3], base(out, 3), fake_ab([1.0, 1.0, 1.0], [], interrupt=(1, 2)), check=ok)
    calls: list[tuple[int, int]] = []
    resumed = run_chain(envs(3), LABELS[:3], base(out, 3), fake_ab([1.0, 1.0, 1.0], calls), check=ok)
    assert calls == [(1, 2), (0, 2)] and resumed.status == "done"
    assert json.loads((out / "chain.json").read_text())["step_alpha"] == pytest.approx(0.05 / 3)
