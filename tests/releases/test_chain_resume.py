"""`batchperf chain` resumed from what an earlier run left: a folder from before the chain's alpha was split over its
runs (issue 56) is refused, and a chain resumed from its committed files (``chain.json`` and each run's ``ab.json``,
``studies/vllm-releases/chain_data.py keep``) keeps the explanations of its confirmed calls."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from ab_fakes import CELLS

from batchperf.ab.settings import UsageProblem
from batchperf.releases.chain import LOCK, run_chain
from batchperf.releases.chain_report import Chain, load, render_chain_markdown
from tests.releases.test_chain import LABELS, base, envs, fake_ab, ok, two


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


def test_a_chain_resumed_from_its_committed_files_still_lists_its_explanations(tmp_path: Path) -> None:
    """Before, a resumed chain explained its confirmed calls again from the pairs' results files; from the committed
    files (no results files) it found no figure at all and chain.md said none differs."""
    out = tmp_path / "chain"
    first = two(out, [1.0, 0.85], [], cpu={0: 0.01, 1: 0.01})
    [step] = first.steps
    assert step.explained[CELLS[0]]["differ"]  # CPU per output token, in both runs
    kept = tmp_path / "kept"  # what chain_data.py keep commits, on another machine: the pairs' files are not there
    kept.mkdir()
    shutil.copy(out / "chain.json", kept / "chain.json")
    for folder in (step.folder, f"confirm-{step.folder}"):
        (kept / folder).mkdir()
        shutil.copy(out / folder / "ab.json", kept / folder / "ab.json")
    shutil.rmtree(out)
    calls: list[tuple[int, int]] = []
    resumed = two(kept, [1.0, 0.85], calls, cpu={0: 0.01, 1: 0.01})
    assert calls == [] and resumed.steps[0].explained == step.explained
    for table in (render_chain_markdown(Chain.of(resumed)), render_chain_markdown(load([kept]))):
        assert "0.29.0 -> 0.30.0, " + CELLS[0] + ", regression confirmed:" in table
        assert "  - cpu_seconds_per_output_token: +17." in table and "no engine figure differs" not in table


def test_a_stored_explanation_of_another_shape_is_not_kept(tmp_path: Path) -> None:
    out = tmp_path / "chain"
    first = two(out, [1.0, 0.85], [], cpu={0: 0.01, 1: 0.01})
    [step] = first.steps
    data = json.loads((out / "chain.json").read_text())
    data["steps"][0]["explained"][CELLS[0]]["differ"][0]["metric"] = "not.a.figure"  # a hand edit
    (out / "chain.json").write_text(json.dumps(data))
    for folder in (step.folder, f"confirm-{step.folder}"):
        for p in (out / folder).iterdir():
            if p.is_dir():
                shutil.rmtree(p)
            elif p.name != "ab.json":
                p.unlink()
    resumed = two(out, [1.0, 0.85], [])
    assert resumed.steps[0].explained == {}  # no line rather than a wrong one, and no traceback rendering it
    assert "regression confirmed:" not in render_chain_markdown(Chain.of(resumed))
