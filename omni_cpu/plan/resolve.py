"""`--deploy-profile auto|FILE` -> a plan checked against this machine: the one resolver.

`run`, `serve`, `bench` and `tune` all come through `resolve`. `auto` plans the
machine's facts (sized for the memory free now: engines start at once); a file
is loaded as written, and its shape bound onto the CPUs and memory nodes this
process may use (omni_cpu.plan.bind), every other value kept. Either way the
result is checked against this machine's facts, and every problem comes back
typed (omni_cpu.plan.fit.Problem): each caller says which kinds it cannot start
with (`fatal`).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from omni_cpu.checkpoint.locate import checkpoint_folder, looks_like_hub_id
from omni_cpu.errors import ModelError, ProfileMismatchError, ShapeMismatchError
from omni_cpu.hardware.facts import Facts
from omni_cpu.plan.bind import Binding, bind_profile
from omni_cpu.plan.fit import Problem, check_problems
from omni_cpu.plan.footprint import ModelFootprint, footprint_for_model
from omni_cpu.plan.policy import PlanOptions, plan_profile
from omni_cpu.profile import Profile, load_profile

# Binding threads to CPUs this machine cannot give them: nothing may start so.
# More memory than the nodes (or the cgroup) hold: the engines would fail at load,
# after a minute of tracebacks; a shape with more cores than there are: slow or wrong.
# `--force` (FORCED) starts them anyway, but not where the CPUs or the weights'
# instructions are not there at all. A preload the runtime lacks is said (fit.WARNS),
# and the stages start without it.
FATAL_TO_START = frozenset({"cpu", "memory", "shape", "isa"})
FORCED = frozenset({"cpu", "isa"})


@dataclass(frozen=True)
class Resolved:
    """A profile bound here, the facts it was checked against, and what the check found."""

    profile: Profile  # as bound here (omni_cpu.plan.bind): what the stages get
    facts: Facts
    footprint: ModelFootprint | None  # None: the model's size is unknown (memory unchecked)
    source: str  # "auto" or the file's absolute path
    options: PlanOptions | None  # what `auto` planned with; None for a file
    problems: tuple[Problem, ...]
    binding: Binding | None = None  # how the planned CPUs map onto this process's

    def of_kind(self, *kinds: str) -> list[Problem]:
        return [problem for problem in self.problems if problem.kind in kinds]


def model_footprint(model: str | None) -> ModelFootprint | None:
    """The footprint of `--model` (the 0.6B's for None); None for a hub id not in the cache
    whose name says no size (its memory goes unchecked). A path that is not a checkpoint
    is refused (ModelError), never planned as the default model."""
    folder = checkpoint_folder(model) if model else None
    try:
        return footprint_for_model(model)
    except ModelError:
        if not model or folder is not None or not looks_like_hub_id(model):
            raise
        return None


def resolve(
    spec: str,
    model: str | None,
    weights: str = "model",
    *,
    facts: Facts | None = None,
    options: PlanOptions | None = None,
    fatal: frozenset[str] = FATAL_TO_START,
) -> Resolved:
    """Plan (`auto`) or load (a file) a profile, check it here, refuse on `fatal` kinds.

    `facts` defaults to this machine read now; `options` are auto's planning inputs
    (weights decide whether the stages share cores on a small box). A file keeps
    the placement and weights it was written with.
    """
    if facts is None:
        from omni_cpu.hardware.probe import read_facts

        facts = read_facts("/")
    footprint = model_footprint(model)
    if spec == "auto":
        options = dataclasses.replace(
            options or PlanOptions(), weights=weights, fit_available_memory=True
        )
        profile = plan_profile(facts, footprint or footprint_for_model(None), options)
        source = "auto"
    else:
        profile = load_profile(spec)
        options = None
        source = os.path.abspath(spec)
    binding = bind_profile(profile, facts)
    problems = tuple(check_problems(binding.profile, facts, footprint, binding=binding))
    refused = [problem for problem in problems if problem.kind in fatal]
    if refused:
        more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
        fix = "plan this machine instead: --deploy-profile auto, or omni-cpu probe --output FILE"
        if all(problem.kind in FATAL_TO_START - FORCED for problem in refused):
            fix += " (or --force to start it anyway)"
        error = ShapeMismatchError if refused[0].kind == "shape" else ProfileMismatchError
        raise error(f"{spec}: {refused[0].message}{more}", fix)
    return Resolved(binding.profile, facts, footprint, source, options, problems, binding)
