"""Reading and writing results files: pytest-benchmark JSON whose benchmarks carry batchperf cells.

A results file (``pytest --benchmark-json``), a merged shard file and a
baseline are all the same format, so there is one reader, :func:`read_results`,
and one writer, :func:`write_results` (atomic: a temporary file in the same
folder, fsync, rename, fsync of the folder). Benchmarks of other plugins in
the same file are kept as they are but never read as cells.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from batchperf.measure.catalogue import CATALOGUE
from batchperf.results.record import MAX_DEPTH, RERUN, SCHEMA_KEY, CellRecord, ResultsError, check_json_values

MAKE_ONE = "Make one with `pytest perf_tests -m cpu --benchmark-json=PATH` or `batchperf run`"
# Top-level key of a results file whose run was interrupted (batchperf.suite.interrupt): why, and which cells
# did not finish. Absent in a complete run.
INCOMPLETE_KEY = "batchperf_incomplete"


@dataclass(frozen=True, slots=True)
class ResultsFile:
    """A pytest-benchmark JSON file with batchperf cells, read and validated."""

    path: Path
    header: dict[str, Any]  # everything but "benchmarks": machine_info, commit_info, datetime, version, ...
    cells: dict[str, CellRecord]  # pytest fullname -> record, in file order
    benches: dict[str, dict[str, Any]]  # pytest fullname -> pytest-benchmark's own fields (no extra_info)
    others: tuple[dict[str, Any], ...] = ()  # benchmarks of other plugins, kept verbatim
    sha256: str = ""
    sources: tuple[tuple[str, str], ...] = ()  # (file, sha256) of every results file behind this one
    alias: str = ""  # the name given beside files of the same stem (read_many); "" = the stem

    @property
    def name(self) -> str:
        return self.alias or self.path.stem

    def renamed(self, name: str) -> ResultsFile:
        """This file under ``name``, its records' ``source`` too (runs are told apart by it)."""
        cells = {k: replace(r, source=name) for k, r in self.cells.items()}
        return replace(self, alias=name, cells=cells)

    @property
    def records(self) -> list[CellRecord]:
        return list(self.cells.values())

    @property
    def machine_info(self) -> dict[str, Any]:
        return dict(self.header.get("machine_info") or {})

    @property
    def commit_info(self) -> dict[str, Any]:
        return dict(self.header.get("commit_info") or {})

    @property
    def datetime(self) -> str:
        return str(self.header.get("datetime") or "")

    @property
    def commit(self) -> str:
        return str(self.commit_info.get("id") or "")

    @property
    def label(self) -> str:
        """When and at which commit the run was made, as a history table names it: ``2026-01-01 02:00 6de10eb0``."""
        return f"{self.datetime[:16].replace('T', ' ')} {self.commit[:8]}".strip()

    @property
    def incomplete(self) -> str | None:
        """Why the run behind this file stopped before its last cell (e.g. "interrupted by SIGTERM"), or None."""
        mark = self.header.get(INCOMPLETE_KEY)
        if not mark:
            return None
        reason = mark.get("reason") if isinstance(mark, dict) else None
        unfinished = mark.get("unfinished") if isinstance(mark, dict) else None
        return str(reason or "interrupted") + (f", {len(unfinished)} cell(s) unfinished"
                                               if isinstance(unfinished, list) else "")

    @property
    def fingerprint(self) -> dict[str, Any] | None:
        """The batchperf fingerprint the gate plugin recorded (``machine_info.batchperf``), raw."""
        return self.machine_info.get("batchperf")

    @property
    def cell_ids(self) -> dict[str, str]:
        return {name: rec.id for name, rec in self.cells.items()}

    @property
    def cells_by_id(self) -> dict[str, CellRecord]:
        """cell id -> record: a cell keeps its id when its test moves (read_results refuses a repeated id)."""
        return {rec.id: rec for rec in self.cells.values()}

    def find(self, fullname: str, cell_id: str | None = None) -> CellRecord | None:
        """The cell named ``fullname``, else the single cell whose id is ``cell_id`` (tests that moved)."""
        if fullname in self.cells:
            return self.cells[fullname]
        same = [rec for rec in self.cells.values() if cell_id and rec.id == cell_id]
        return same[0] if len(same) == 1 else None

    def entry(self, fullname: str, record: CellRecord | None = None, with_traces: bool = True) -> dict[str, Any]:
        """The benchmark ``fullname`` as pytest-benchmark writes it, its ``extra_info`` from ``record``
        (default: the cell as read)."""
        record = self.cells[fullname] if record is None else record
        return {**self.benches[fullname], "extra_info": record.to_dict(with_traces=with_traces)}

    def entries(self) -> Iterator[dict[str, Any]]:
        """Every benchmark as pytest-benchmark writes it, other plugins' included."""
        for name in self.cells:
            yield self.entry(name)
        yield from self.others


def read_results(path: str | Path, what: str = "results") -> ResultsFile:
    """Every batchperf cell of ``path``, validated; ResultsError names the file, the cell and the field."""
    path = Path(path)
    try:
        # a FIFO would block the read, a link to /dev/zero would read without bound: only regular files are read
        mode = os.stat(path).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):  # a folder: IsADirectoryError below says so
            raise ResultsError(path, f"is not a regular file (a FIFO, a socket or a device), not a {what} file",
                               "Pass the results file itself")
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ResultsError(path, f"no such {what} file", MAKE_ONE.replace("PATH", str(path))) from None
    except IsADirectoryError:
        raise ResultsError(path, f"is a folder, not a {what} file", "Pass the JSON file inside it") from None
    except OSError as exc:
        raise ResultsError(path, f"cannot read the {what} file ({exc.strerror})", "Check its permissions") from None
    fix = (f"Restore it from git (`git checkout -- {path}`) or make a new one with `batchperf refresh`"
           if what == "baseline"
           else "The file is corrupt or truncated; re-run the cells to remake it")
    try:
        data = json.loads(raw)
    except RecursionError:  # Python's JSON parser recurses: about 1000 levels of [[[...]]] end it
        raise ResultsError(path, f"not a results file: its JSON is nested deeper than {MAX_DEPTH} levels", fix) from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer past Python's digit limit
        raise ResultsError(path, f"not valid JSON ({json_problem(exc)})", fix) from None
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise ResultsError(path, "no 'benchmarks' list: this is not a pytest-benchmark results file",
                           "Pass a file written by `pytest --benchmark-json` or a baseline.json under baselines/")
    check_json_values({k: v for k, v in data.items() if k != "benchmarks"}, str(path))
    for key in ("machine_info", "commit_info"):
        if not isinstance(data.get(key, {}), dict):
            raise ResultsError(path, f"{key} is a {type(data[key]).__name__}, not an object", RERUN)
    if (why := fingerprint_problem((data.get("machine_info") or {}).get("batchperf"))) is not None:
        raise ResultsError(path, f"machine_info.batchperf{why}", "Re-run the cells with this batchperf, or restore "
                           "the file from git; the fingerprint is written by batchperf's gate plugin, never by hand")
    cells: dict[str, CellRecord] = {}
    benches: dict[str, dict[str, Any]] = {}
    others: list[dict[str, Any]] = []
    by_id: dict[str, str] = {}  # cell id -> fullname: one entry per cell, as merge and recommend require
    for i, bench in enumerate(data["benchmarks"]):
        if not isinstance(bench, dict):  # pytest-benchmark writes objects only; a writer could not sort it back
            raise ResultsError(path, f"benchmark #{i} is a {type(bench).__name__}, not an object", RERUN)
        info = bench.get("extra_info")
        if not isinstance(info, dict) or SCHEMA_KEY not in info:
            others.append(bench)  # another plugin's benchmark in the same file
            continue
        name = bench.get("fullname") or bench.get("name")
        if not isinstance(name, str) or not name:
            raise ResultsError(path, f"benchmark #{i} has no fullname", RERUN)
        if name in cells:
            raise ResultsError(path, f"cell {name} appears twice", "Keep one entry per cell (re-run, or merge shards "
                               "with `batchperf merge`, which refuses duplicates)")
        check_json_values({k: v for k, v in bench.items() if k != "extra_info"}, f"{path}: {name}")
        cells[name] = record = CellRecord.from_dict(info, where=f"{path}: {name}", fullname=name, source=path.stem)
        if (why := sections_problem(record)) is not None:
            raise ResultsError(f"{path}: {name}", why, RERUN)
        if (other := by_id.setdefault(record.id, name)) != name:
            # readers keyed by cell id (report, compare, history) would silently keep one of the two
            raise ResultsError(path, f"cell {record.id} appears twice ({other} and {name})",
                               "Keep one entry per cell (re-run, or merge shards with `batchperf merge`)")
        benches[name] = {k: v for k, v in bench.items() if k != "extra_info"}
    if not cells:
        raise ResultsError(path, f"no batchperf cells in it (no extra_info.{SCHEMA_KEY})",
                           "Was it made by `pytest perf_tests`? " + MAKE_ONE.replace("PATH", str(path)))
    header = {k: v for k, v in data.items() if k != "benchmarks"}
    digest = hashlib.sha256(raw).hexdigest()
    return ResultsFile(path, header, cells, benches, tuple(others), digest, ((str(path), digest),))


def fingerprint_problem(raw: Any) -> str | None:
    """What is wrong with the shape of a recorded fingerprint (``machine_info.batchperf``), after its dotted path
    (e.g. ``.upgrade is a list, not an object``); None when it is absent (null) or has the shape every reader uses.

    The one check of that shape: the reader applies it to every file, and
    :meth:`batchperf.regress.fingerprint.Fingerprint.from_dict` to whatever it parses."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        return f" is a {type(raw).__name__}, not an object"
    if "identity" not in raw:
        return " has no 'identity': not a batchperf fingerprint"
    for key, kind, name in (("identity", dict, "an object"), ("upgrade", dict, "an object"),
                            ("soft", dict, "an object"), ("key", str, "a string")):
        if key in raw and not isinstance(raw[key], kind):
            return f".{key} is a {type(raw[key]).__name__}, not {name}"
    identity = raw["identity"]
    if missing := [k for k in ("arch", "cpu_model", "cpu_cores") if k not in identity]:
        return f".identity lacks {', '.join(missing)}"
    for key in ("cpu_cores", "cpu_threads"):
        value = identity.get(key, 1)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            return f".identity.{key} is {value!r}, not a whole number >= 1"
    cpu = identity.get("cpu")
    if cpu is not None and not (isinstance(cpu, dict) and isinstance(cpu.get("isa", []), list)):
        return ".identity.cpu is not an object with an isa list"
    gpus = identity.get("gpus", [])
    if not isinstance(gpus, list) or not all(isinstance(g, dict) and "name" in g and "memory_mib" in g for g in gpus):
        return ".identity.gpus is not a list of {name, memory_mib} objects"
    return None


# The shape of the traffic sections every reader relies on (issue 38): the fields a reader indexes, and the type
# of each field it reads. Numbers are JSON numbers, never true/false (``max_load: true`` would read as 1.0).
CAPACITY_REQUIRED = ("max_load", "max_request_rate")  # what every reader indexes, in records before issue 57 too
CAPACITY_NUMBERS = tuple(m.name for m in CATALOGUE if m.section == "capacity")  # every number the section stores
TYPED_FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    "capacity": {"converged": (bool,), "why": (str,)},
    "policy": {"name": (str,), "text": (str,), "label": (str,), "engine": (str,)},
    "workload": {"kind": (str,), "label": (str,), "spec": (str,), "file_hash": (str, type(None)),
                 "open_loop": (bool,), "load": (int, float), "expected_prefix_hit_rate": (int, float),
                 "slos": (dict,), "tenants": (list,), "priority": (str,), "priority_note": (str,),
                 "prefix_caching": (bool, type(None))},
}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def name_problem(name: object) -> str | None:
    """Why ``name`` (a tenant's) is no name every reader can print, plot and export, or None."""
    if not isinstance(name, str):
        return f"is {type(name).__name__} {name!r}, not a name"
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return f"{name!r} holds a lone surrogate (half of a UTF-16 pair), which is no character"
    return None


def sections_problem(record: CellRecord) -> str | None:
    """What is wrong with the shape of a record's traffic sections (``slo``, ``tenants``, ``policy``, ``client``,
    ``capacity``, ``workload``) and its traces' tenants, after the field's path; None when every reader can use
    them. The one check of that shape: :func:`read_results` and :func:`write_results` apply it to every cell
    (``client`` is checked by :func:`batchperf.measure.client_lag.problem`, in the record)."""
    for key, value in record.slo.items():
        if not _number(value):
            return f"slo.{key} is {value!r}, not a number"
    for tenant, block in record.tenants.items():
        if (why := name_problem(tenant)) is not None:
            return f"tenants: a tenant's name {why}"
        for key, value in block.items():
            if not _number(value):
                return f"tenants[{tenant!r}].{key} is {value!r}, not a number"
    if record.capacity:
        if missing := [k for k in CAPACITY_REQUIRED if k not in record.capacity]:
            return f"capacity lacks {', '.join(missing)}"
        for key in CAPACITY_NUMBERS:
            if key in record.capacity and not _number(record.capacity[key]):
                return f"capacity.{key} is {record.capacity[key]!r}, not a number"
    for section, typed in TYPED_FIELDS.items():
        block = getattr(record, section)
        for key, kinds in typed.items():
            if key in block and (not isinstance(block[key], kinds) or (isinstance(block[key], bool)
                                                                        and bool not in kinds)):
                return f"{section}.{key} is {block[key]!r}, not {' or '.join(k.__name__ for k in kinds)}"
    for tenant, slo in (record.workload.get("slos") or {}).items():
        if (why := name_problem(tenant)) is not None:
            return f"workload.slos: a tenant's name {why}"
        if not isinstance(slo, dict) or not all(v is None or _number(v) for v in slo.values()):
            return f"workload.slos[{tenant!r}] is {slo!r}, not an object of SLO numbers (ms) or null"
    for tenant in record.workload.get("tenants") or []:
        if (why := name_problem(tenant)) is not None:
            return f"workload.tenants: a tenant's name {why}"
    for i, trace in enumerate(record.traces):
        requests = trace.get("requests") if isinstance(trace, dict) else None
        if not isinstance(requests, list):
            return f"traces[{i}] has no list of requests"
        for j, request in enumerate(requests):
            if not isinstance(request, dict):
                return f"traces[{i}].requests[{j}] is not an object"
            if (tenant := request.get("tenant")) is not None and (why := name_problem(tenant)) is not None:
                return f"traces[{i}].requests[{j}].tenant {why}"
    return None


def results_document(header: dict[str, Any], entries: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """A pytest-benchmark JSON document: ``header`` plus the benchmarks, sorted by name."""
    return {**header, "benchmarks": sorted(entries, key=lambda b: str(b.get("fullname") or b.get("name")))}


def write_results(path: Path, header: dict[str, Any], entries: Iterable[dict[str, Any]]) -> Path:
    """Write a results (or baseline) file atomically; ``entries`` as :meth:`ResultsFile.entries` gives them.

    Every cell is validated as :func:`read_results` would, so nothing is written that could not be read
    back (a NaN or a negative measurement names its cell and metric)."""
    entries = list(entries)
    for i, bench in enumerate(entries):
        info = bench.get("extra_info") if isinstance(bench, dict) else None
        if isinstance(info, dict) and SCHEMA_KEY in info:
            where = f"{path}: {bench.get('fullname') or bench.get('name') or f'#{i}'}"
            if (why := sections_problem(CellRecord.from_dict(info, where=where))) is not None:
                raise ResultsError(where, why, RERUN)
    text = json.dumps(results_document(header, entries), indent=1, sort_keys=True) + "\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)
    except OSError as exc:
        raise ResultsError(path, f"cannot write it ({exc.strerror or exc})",
                           "Check that its folder exists and is writable, or write elsewhere") from None
    return path


def json_problem(exc: ValueError) -> str:
    """What is wrong with a JSON text, from the parser's error: Python's own words, except for an integer past its
    digit limit, whose message advises a Python setting (``sys.set_int_max_str_digits``) no user of a file should
    change: no measurement has thousands of digits, so the file is damaged."""
    text = str(exc)
    if "integer string conversion" in text:
        digits = re.search(r"value has (\d+) digits", text)
        return f"a number {'of ' + digits.group(1) + ' digits' if digits else 'too long to read'}, which no measurement has"
    return text


NAME_PART = 64  # characters of a user's text in a file name: two of them and a prefix stay under 255 bytes


def file_part(text: str, limit: int = NAME_PART, distinct: bool = False) -> str:
    """``text`` (a label, a cell id) as part of a file or folder name: anything but letters, digits, '.', '_' and '-'
    becomes '_', no dot at either end. One longer than ``limit`` is cut and ends in 8 hex digits of the text's
    sha256, so it stays under the 255 bytes a name may hold and apart from the others cut the same way.
    ``distinct``: every text the rule changed ends so, so two texts never share a name (``a/b`` and ``a:b``); without
    it a short text keeps the name it always had (a chain resumes from folders named so)."""
    part = re.sub(r"[^A-Za-z0-9._-]", "_", text).strip(".") or "_"
    if len(part) <= limit and not (distinct and part != text):
        return part
    return f"{part[:limit - 9]}-{hashlib.sha256(text.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


def atomic_write_text(path: Path, text: str) -> None:
    """``path`` holds either its old content or ``text``, never a mix, even if the machine dies."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """``path`` holds either its old content or ``data``, never a mix, even if the machine dies."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # a file to keep or commit, not mkstemp's private 0600
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temporaries(path: Path) -> list[Path]:
    """Temporary files an interrupted :func:`atomic_write_text` of ``path`` left behind."""
    return sorted(path.parent.glob(f".{path.name}.*.tmp"))


def read_many(paths: Iterable[str | Path]) -> list[ResultsFile]:
    """Several results files (before/after an upgrade, say); runs are told apart by name: the file's stem, or where
    stems are the same (two hosts' ``baseline.json``) the folders before it that tell them apart
    (``cpu-…-e8b1773c67/baseline``). The same file twice is refused."""
    files = [read_results(p) for p in paths]
    seen: dict[Path, Path] = {}
    for f in files:
        if (where := f.path.resolve()) in seen:
            raise ResultsError(f.path, f"given twice (as {seen[where]} and {f.path}); runs are told apart by file",
                               "Give each results file once")
        seen[where] = f.path
    names = _distinct_names([f.path.resolve() for f in files])
    return [f if name == f.name else f.renamed(name) for f, name in zip(files, names, strict=True)]


def _distinct_names(paths: list[Path]) -> list[str]:
    """Each path's stem; for stems that several share, the fewest folders before it that make them all differ."""
    names = [p.stem for p in paths]
    for stem in {n for n in names if names.count(n) > 1}:
        group = [i for i, p in enumerate(paths) if p.stem == stem]
        for depth in range(1, max(len(paths[i].parts) for i in group)):
            labels = {i: "/".join((*paths[i].parent.parts[-depth:], stem)) for i in group}
            if len(set(labels.values())) == len(group):
                break
        for i, label in labels.items():
            names[i] = label
    return names
