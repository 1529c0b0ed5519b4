"""The planner: pure functions from (facts, model footprint, options) to a deploy profile.

Pure: policy, placement, capacity, speed, listening, costs, topology, kernel_choice and fit
read nothing (tests/plan/test_pure.py holds them to it). Three modules read, each for one
thing: `machine` reads a machine's facts (`read_facts` of a root: the live machine or a
dump), `resolve` the live machine and a profile file (`--deploy-profile auto|FILE` for run,
serve, bench and tune), `footprint` a model's config files (never the machine). `fit` says
whether a profile still fits a machine.
"""

from omni_cpu.errors import MachineTooSmallError, PlanError
from omni_cpu.plan.footprint import ModelFootprint, footprint_for_model
from omni_cpu.plan.machine import plan_for_machine
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
