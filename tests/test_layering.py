"""The stage packages (docs/design.md): no module imports a higher or a sibling stage, and no module imports cycle.

Read from the source with ``ast``, so every ``batchperf`` import counts: at module level, inside
functions, and under ``if TYPE_CHECKING:`` (a type-only import still ties the stages together).
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "batchperf"

# stage -> rank; a stage may import lower ranks only (and itself), never a same-rank sibling
RANK = {"envs": 0, "measure": 0, "telemetry": 0, "launch": 0, "engine": 0, "workload": 1, "results": 1,
        "backends": 2, "regress": 2, "capacity": 2, "ab": 3, "report": 3, "releases": 4, "calibrate": 4, "suite": 4,
        "cli": 5}
# stages held to fewer imports than their rank allows: readers of results never reach the measuring stack
ONLY = {"envs": set(), "results": {"measure"}, "regress": {"results", "measure", "telemetry", "launch", "envs"},
        "capacity": {"results", "measure", "launch"}, "report": {"results", "regress", "measure", "telemetry", "capacity"},
        "ab": {"results", "regress", "measure", "launch"}}


@dataclass(frozen=True, slots=True)
class Import:
    path: Path  # the importing file
    line: int
    module: str  # the importing module, e.g. batchperf.suite.plugin
    target: str  # the imported module, e.g. batchperf.measure.kv

    def __str__(self) -> str:
        return f"{self.path.relative_to(SRC.parent)}:{self.line} imports {self.target}"


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def stage(module: str) -> str | None:
    """``batchperf.<stage>...`` -> stage; None for the top-level package itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def _resolve(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def imports(path: Path, importer: str | None = None) -> Iterator[Import]:
    """Every import of a batchperf module in ``path``, to the module it names (``from pkg import submodule`` too)."""
    importer = importer or module_name(path)
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(importer, path.name == "__init__.py", node)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for target in dict.fromkeys(targets):
            if target == "batchperf" or target.startswith("batchperf."):
                yield Import(path, node.lineno, importer, target)


ALL_IMPORTS = [imp for path in MODULES.values() for imp in imports(path)]


def violation(imp: Import) -> str | None:
    """Why this import breaks the layering; None when it is allowed."""
    src, dst = stage(imp.module), stage(imp.target)
    if src is None or dst is None or src == dst:
        return None
    if src not in RANK or dst not in RANK:
        unknown = src if src not in RANK else dst
        return f"{unknown!r} is not a known stage ({', '.join(RANK)}); add it to RANK in tests/test_layering.py"
    if RANK[dst] > RANK[src]:
        return f"{src} (rank {RANK[src]}) imports a higher stage, {dst} (rank {RANK[dst]})"
    if RANK[dst] == RANK[src]:
        return f"{src} and {dst} are sibling stages (rank {RANK[src]}) and must not import each other"
    if src in ONLY and dst not in ONLY[src]:
        return f"{src} may import {', '.join(sorted(ONLY[src]))} only"
    return None


def cycles(edges: list[Import], modules: Collection[str]) -> list[list[Import]]:
    """Import cycles between ``modules``: for each module on one, a shortest one through it (each cycle once)."""
    graph: dict[str, dict[str, Import]] = {}
    for imp in edges:
        if imp.target in modules and imp.target != imp.module:
            graph.setdefault(imp.module, {}).setdefault(imp.target, imp)
    found, done = [], set()
    for start in sorted(graph):
        if start in done:
            continue
        path = _cycle_from(start, graph)
        if path:
            found.append(path)
            done.update(imp.module for imp in path)
    return found


def _cycle_from(start: str, graph: dict[str, dict[str, Import]]) -> list[Import]:
    """The imports of a shortest cycle through ``start`` (breadth first), or [] if there is none."""
    parents: dict[str, Import] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for module in frontier:
            for target, imp in sorted(graph.get(module, {}).items()):
                if target == start:
                    chain = [imp]
                    while chain[0].module != start:
                        chain.insert(0, parents[chain[0].module])
                    return chain
                if target not in parents:
                    parents[target] = imp
                    nxt.append(target)
        frontier = nxt
    return []


def test_the_source_tree_is_read() -> None:
    assert {stage(m) for m in MODULES} - {None} == set(RANK)  # every stage package exists, and nothing else
    assert len(ALL_IMPORTS) > 100


def test_no_module_imports_a_higher_or_a_sibling_stage() -> None:
    bad = [f"{imp}: {why}" for imp in ALL_IMPORTS if (why := violation(imp))]
    assert not bad, f"{len(bad)} import(s) break the stage order (docs/design.md):\n" + "\n".join(bad)


def test_no_import_cycle_between_modules() -> None:
    found = cycles(ALL_IMPORTS, MODULES)
    assert not found, f"{len(found)} import cycle(s):\n" + "\n".join(
        " -> ".join([c[0].module, *(imp.target for imp in c)]) + "\n    " + "\n    ".join(map(str, c)) for c in found)


def _imp(module: str, target: str, line: int = 1) -> Import:
    return Import(PACKAGE / (module.split(".", 1)[1].replace(".", "/") + ".py"), line, module, target)


@pytest.mark.parametrize(("module", "target", "why"), [
    ("batchperf.measure.kv", "batchperf.regress.gate", "measure (rank 0) imports a higher stage, regress (rank 2)"),
    ("batchperf.measure.kv", "batchperf.engine.scheduler", "measure and engine are sibling stages (rank 0)"),
    ("batchperf.workload.spec", "batchperf.results.record", "workload and results are sibling stages (rank 1)"),
    ("batchperf.regress.gate", "batchperf.backends.cell_run", "regress and backends are sibling stages (rank 2)"),
    ("batchperf.results.record", "batchperf.engine.request", "results may import measure only"),
    ("batchperf.regress.gate", "batchperf.workload.spec", "regress may import envs, launch, measure, results, telemetry only"),
    ("batchperf.ab.run", "batchperf.telemetry.sampler", "ab may import launch, measure, regress, results only"),
    ("batchperf.report.page", "batchperf.engine.request", "report may import capacity, measure, regress, results, telemetry only"),
    ("batchperf.report.page", "batchperf.suite.cell", "report (rank 3) imports a higher stage, suite (rank 4)"),
    ("batchperf.suite.plugin", "batchperf.frobnicate.x", "'frobnicate' is not a known stage"),
])
def test_each_kind_of_violation_is_named(module: str, target: str, why: str) -> None:
    message = violation(_imp(module, target))
    assert message is not None and message.startswith(why)


@pytest.mark.parametrize(("module", "target"), [
    ("batchperf.results.record", "batchperf.measure.trace"),
    ("batchperf.backends.continuous", "batchperf.engine.scheduler"),
    ("batchperf.cli.run", "batchperf.suite.plugin"),
    ("batchperf.suite.pool", "batchperf.suite.models"),
])
def test_allowed_imports_pass(module: str, target: str) -> None:
    assert violation(_imp(module, target)) is None


def test_a_cycle_is_found_and_named_by_file_and_line() -> None:
    edges = [_imp("batchperf.suite.a", "batchperf.suite.plugin", 3), _imp("batchperf.suite.plugin", "batchperf.suite.shard", 7),
             _imp("batchperf.suite.shard", "batchperf.suite.a", 9), _imp("batchperf.suite.shard", "batchperf.measure.kv", 2)]
    (found,) = cycles(edges, {"batchperf.suite.a", "batchperf.suite.plugin", "batchperf.suite.shard", "batchperf.measure.kv"})
    assert [str(imp) for imp in found] == ["src/batchperf/suite/a.py:3 imports batchperf.suite.plugin",
                                           "src/batchperf/suite/plugin.py:7 imports batchperf.suite.shard",
                                           "src/batchperf/suite/shard.py:9 imports batchperf.suite.a"]
    assert cycles(edges[1:], {"batchperf.suite.a", "batchperf.suite.plugin", "batchperf.suite.shard"}) == []


def test_every_kind_of_import_is_seen(tmp_path: Path) -> None:
    source = tmp_path / "page.py"
    source.write_text("""from __future__ import annotations
from typing import TYPE_CHECKING
import json
import batchperf.measure.kv
from batchperf.measure import metrics, kv_growth
from batchperf import results
from ..regress import gate
from . import plots
if TYPE_CHECKING:
    from batchperf.suite.models import LoadedModel
def build():
    from batchperf.backends.cell_run import run_cell
""")
    found = [(imp.line, imp.target) for imp in imports(source, "batchperf.report.page")]
    assert found == [(4, "batchperf.measure.kv"), (5, "batchperf.measure.metrics"), (5, "batchperf.measure.kv_growth"),
                     (6, "batchperf.results"), (7, "batchperf.regress.gate"), (8, "batchperf.report.plots"),
                     (10, "batchperf.suite.models"), (12, "batchperf.backends.cell_run")]
