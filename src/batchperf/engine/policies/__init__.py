"""Batching policies for batchperf's continuous engine: what the scheduler admits, caps and preempts each step.

``fcfs`` (the default), ``seed``, ``aimd``, ``priority`` and ``fair``; see docs/continuous.md, "Policies".
Torch-free, like the scheduler.
"""

from batchperf.engine.policies.base import Param, Policy, PolicyContext, StepReport, TenantTargets
from batchperf.engine.policies.spec import KNOWN_POLICIES, POLICIES, PolicySpec, parse_policy

__all__ = ["KNOWN_POLICIES", "POLICIES", "Param", "Policy", "PolicyContext", "PolicySpec", "StepReport",
           "TenantTargets", "parse_policy"]
