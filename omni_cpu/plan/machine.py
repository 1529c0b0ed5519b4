"""Facts in, profile out, with the model named as the CLI names it.

The facts are the planner's whole input besides the model and options (preload
libraries included), so planning a saved `probe --json` gives the live plan.
"""

from __future__ import annotations

import os
from typing import Any

from omni_cpu.hardware.facts import Facts
from omni_cpu.plan.footprint import footprint_for_model
from omni_cpu.plan.formats import FormatCapacity, compare_formats
from omni_cpu.plan.policy import PlanOptions, plan_profile
from omni_cpu.profile.model import Profile


def plan_for_facts(facts: Facts, model: str | None = None, **options: Any) -> Profile:
    """The profile for `model` on the machine the facts describe (options: PlanOptions')."""
    return plan_profile(facts, footprint_for_model(model), PlanOptions(**options))


def plan_for_machine(
    model: str | None = None, root: str | os.PathLike[str] = "/", **options: Any
) -> tuple[Facts, Profile]:
    """Facts of the machine at `root` and the profile planned for `model` on it."""
    from omni_cpu.hardware.probe import read_facts

    facts = read_facts(root)
    return facts, plan_for_facts(facts, model, **options)


def compare_formats_for_facts(
    facts: Facts, model: str | None = None, **options: Any
) -> tuple[FormatCapacity, ...]:
    """Each weight format's predicted capacity for `model` on the facts' machine, planned
    with `options` (PlanOptions') but its weights: omni_cpu.plan.formats."""
    return compare_formats(facts, footprint_for_model(model), PlanOptions(**options))
