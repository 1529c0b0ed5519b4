"""The `auto` path: read this machine (or a dump), then plan. The one impure planner entry."""

from __future__ import annotations

import os

from omni_cpu.hardware.facts import Facts
from omni_cpu.plan.footprint import footprint_for_model
from omni_cpu.plan.policy import PlanOptions, plan_profile
from omni_cpu.profile.model import Profile


def plan_for_facts(
    facts: Facts,
    model: str | None = None,
    root: str | os.PathLike[str] = "/",
    *,
    stages: int = 2,
    reserve: int | None = None,
    max_seqs: int | None = None,
    dtype: str | None = None,
    fit_available_memory: bool = False,
    weights: str = "model",
) -> Profile:
    """The profile for `model` on the machine whose facts were read from `root`."""
    options = PlanOptions(
        stages=stages,
        reserve=reserve,
        max_seqs=max_seqs,
        dtype=dtype,
        fit_available_memory=fit_available_memory,
        weights=weights,
    )
    return plan_profile(facts, footprint_for_model(model), options)


def plan_for_machine(
    model: str | None = None,
    root: str | os.PathLike[str] = "/",
    **options: int | str | None,
) -> tuple[Facts, Profile]:
    """Facts of the machine at `root` and the profile planned for `model` on it."""
    from omni_cpu.hardware.probe import read_facts

    facts = read_facts(root)
    return facts, plan_for_facts(facts, model, root, **options)  # type: ignore[arg-type]
