"""Whether the stages can be forked from this driver, and the one re-execution that lets them.

A forked stage (omni_cpu.platform.fork) keeps the libraries its driver loaded:
LD_PRELOAD is read when a program starts, so the driver must already run with
the preloads its stages' environment names (Intel OpenMP, tcmalloc: the
profile's `LD_PRELOAD`). `relaunch_if_needed` re-executes the `omni-cpu` command
once, same pid and arguments, with them added, before torch is imported; the
second start costs the interpreter and the CLI's own imports and plan again
(`driver_relaunch_s` in the start-up report), against the stages' ~9 s each of
importing torch, vLLM and vLLM-Omni a second time. It also starts the driver
with a mark of its own (`envs.DRIVER`, omni_cpu.process.guard), which the stages it
forks carry and its watchdog finds them by.

Stages are spawned instead (vLLM-Omni's way) when `OMNI_CPU_STAGE_START=spawn`,
when the stages' OpenMP is not Intel's (GNU OpenMP reads its binding variables
once, when it loads in the driver, so a forked stage could not bind its threads
to its own CPUs), when the stages' preloads differ, or when this process runs
without them (a library caller, say): `fork_blocker` names which.
"""

from __future__ import annotations

import os
import sys
import time

from omni_cpu import envs
from omni_cpu.launch.plan import LaunchPlan
from omni_cpu.process import procfs
from omni_cpu.process.guard import driver_mark, new_driver_mark

INTEL_OPENMP_MARKS = ("libiomp", "libomp.")


def preload_entries(text: str) -> tuple[str, ...]:
    """The libraries an LD_PRELOAD value names, in order (colons or spaces between them)."""
    return tuple(part for part in text.replace(" ", ":").split(":") if part)


def stage_preloads(plan: LaunchPlan) -> list[tuple[str, ...]]:
    """Each stage's LD_PRELOAD entries (vLLM-Omni sets them when it starts the stage)."""
    replica = plan.profile.replicas[plan.replica]
    return [
        preload_entries(plan.stage_env(stage.stage_id).get("LD_PRELOAD", ""))
        for stage in replica.stages
    ]


def _loaded(libraries: tuple[str, ...]) -> bool:
    mapped = procfs.mapped_files()
    return all(os.path.realpath(library) in mapped for library in libraries)


def preload_blocker(libraries: tuple[str, ...], *, this_process: bool = True) -> str | None:
    """Why stages preloading `libraries` cannot be forked from this process, or None.

    `this_process=False` leaves out whether this process already runs with them
    (what a re-execution would change).
    """
    if envs.OMNI_CPU_STAGE_START == "spawn":  # a value it does not take is refused there
        return f"{envs.STAGE_START.name}=spawn"
    if not any(mark in os.path.basename(lib) for lib in libraries for mark in INTEL_OPENMP_MARKS):
        return "the stages do not preload Intel OpenMP (GNU OpenMP binds only when it loads)"
    if this_process and not _loaded(libraries):
        return "this process was started without the stages' LD_PRELOAD"
    return None


def fork_blocker(plan: LaunchPlan, *, this_process: bool = True) -> str | None:
    """Why the stages of `plan` cannot be forked from this process, or None when they can."""
    preloads = set(stage_preloads(plan))
    if len(preloads) != 1:
        return "the stages preload different libraries"
    (libraries,) = preloads
    return preload_blocker(libraries, this_process=this_process)


# Seconds from this process re-executing itself to reaching `relaunch_if_needed` again.
_relaunch_s: float | None = None


def relaunch_seconds() -> float | None:
    """What the re-execution cost this start (None when this process did not re-execute)."""
    return _relaunch_s


def relaunch_if_needed(plan: LaunchPlan) -> None:
    """Re-execute this `omni-cpu` command with the stages' preloads, if that lets it fork them.

    Call it from the CLI process only (it replaces the process; nothing printed or
    read before it may matter), before torch is imported. Returns when no
    re-execution is needed or possible; otherwise does not return.
    """
    global _relaunch_s
    mark = driver_mark(os.getpid(), dict(os.environ))
    if mark:
        # Started by our own re-execution: count it once, never re-execute again.
        if _relaunch_s is None:
            _relaunch_s = max(0.0, time.time() - float(mark.split()[1]))
        return
    if fork_blocker(plan, this_process=False) is not None or fork_blocker(plan) is None:
        return
    (libraries,) = set(stage_preloads(plan))
    env = dict(os.environ)
    env["LD_PRELOAD"] = ":".join(libraries)
    env.pop(envs.DRIVER.name, None)
    env[envs.DRIVER.name] = new_driver_mark(os.getpid(), time.time())
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    try:
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
    except OSError:
        return  # the stages are spawned instead
