"""``--batchperf-policies`` entries: ``NAME`` or ``NAME:k=v,k=v`` (e.g. ``aimd:decrease=0.7,step=1``).

:func:`parse_policy` checks the name, every parameter and its range, and returns a :class:`PolicySpec`; the
policy object itself is built per run, when its :class:`~batchperf.engine.policies.base.PolicyContext` (the
cell's batch size, its tenants' SLOs) is known, and parameters derived from the context are checked again then.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from batchperf.engine.policies.aimd import Aimd
from batchperf.engine.policies.base import Policy, PolicyContext
from batchperf.engine.policies.fair import Fair
from batchperf.engine.policies.fcfs import Fcfs
from batchperf.engine.policies.priority import Priority
from batchperf.engine.policies.seed import Seed

POLICIES: dict[str, type[Policy]] = {cls.name: cls for cls in (Fcfs, Seed, Aimd, Priority, Fair)}
KNOWN_POLICIES: tuple[str, ...] = tuple(POLICIES)


@dataclass(frozen=True, slots=True)
class PolicySpec:
    name: str
    params: Mapping[str, int | float | None]  # every parameter, defaults filled; None: derived from the context
    text: str  # the normalised entry: NAME, or NAME:k=v,... with the given parameters sorted
    given: Mapping[str, int | float]  # the parameters the entry set

    def __hash__(self) -> int:  # the mappings are not hashable; the normalised text identifies the spec
        return hash(self.text)

    @property
    def label(self) -> str:
        """Short and id-safe: ``fcfs``, ``aimd-decrease0.7-step1``."""
        return self.text.replace(":", "-").replace(",", "-").replace("=", "")

    @property
    def is_default(self) -> bool:
        return self.text == "fcfs"

    def build(self, ctx: PolicyContext) -> Policy:
        """A fresh policy for one run; ValueError if a parameter derived from ``ctx`` is out of range."""
        return POLICIES[self.name](ctx, **self.given)


def _value(cls: type[Policy], key: str, text: str) -> int | float:
    param = cls.PARAMS[key]
    try:
        value = param.kind(text)
    except ValueError:
        raise ValueError(f"{cls.name}: {key} must be {'an integer' if param.kind is int else 'a number'}, "
                         f"got {text!r}") from None
    return param.check(cls.name, key, value)


def parse_policy(text: str) -> PolicySpec:
    """``NAME`` or ``NAME:k=v,k=v`` -> PolicySpec; ValueError naming the known policies, parameters or bounds."""
    name, sep, rest = text.strip().partition(":")
    name = name.strip()
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r} in {text!r}; known policies: {', '.join(KNOWN_POLICIES)}")
    cls = POLICIES[name]
    given: dict[str, int | float] = {}
    if sep:
        for item in rest.split(","):
            key, eq, value = (part.strip() for part in item.partition("="))
            if not eq or not key or not value:
                raise ValueError(f"policy {text!r}: {item.strip()!r} is not k=v; write NAME:k=v,k=v "
                                 f"({cls.known_params()})")
            if key not in cls.PARAMS:
                raise ValueError(f"policy {text!r}: unknown parameter {key!r}; {cls.known_params()}")
            if key in given:
                raise ValueError(f"policy {text!r}: {key} is given twice")
            given[key] = _value(cls, key, value)
    params = cls.resolve(given)
    normal = name + (":" + ",".join(f"{k}={given[k]!r}" for k in sorted(given)) if given else "")
    return PolicySpec(name, params, normal, given)
