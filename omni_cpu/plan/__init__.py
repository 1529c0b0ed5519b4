"""The planner: pure functions from (facts, model footprint, options) to a deploy profile.

`resolve` is its one door that reads the live machine (`--deploy-profile auto|FILE`
for run, serve, bench and tune); `fit` says whether a profile still fits a machine.
"""

from omni_cpu.plan.footprint import ModelFootprint, footprint_for_model
from omni_cpu.plan.machine import plan_for_machine
from omni_cpu.plan.placement import MachineTooSmallError, PlanError
from omni_cpu.plan.policy import PlanOptions, choose_dtype, plan_profile

__all__ = [
    "MachineTooSmallError",
    "ModelFootprint",
    "PlanError",
    "PlanOptions",
    "choose_dtype",
    "footprint_for_model",
    "plan_for_machine",
    "plan_profile",
]
