"""Stage processes: which stage each process is, and the CPUs its threads were bound to.

Walking and stopping process trees is `omni_cpu.process.proctree`'s job, reading
a process's environment and threads `omni_cpu.process.procfs`'s; this module
adds what is specific to stage processes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from omni_cpu.process import procfs, proctree
from omni_cpu.profile.model import stage_name

# vLLM's own variable: the CPUs a stage's OpenMP threads bind to, one per thread.
BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"
# What each stage process shows as its title (vLLM's setproctitle) -> what it is.
ROLE_MARKERS = (("EngineCore", "engine core"), ("Worker", "worker"))
RESOURCE_TRACKER_MARK = "multiprocessing.resource_tracker"
# The roles that run a stage's model: the ones that can die or hang with work in them.
STAGE_ROLES = ("engine core", "worker")

# A bind list -> the stages (id, name) started with it, in stage order.
StageBinds = dict[str, tuple[tuple[int, str], ...]]


def stage_binds(deploy_config: Mapping[str, Any]) -> StageBinds:
    """Each stage's bind list in a deploy config -> the stages started with it.

    Read from `platforms.cpu.stages[].env`, the environment vLLM-Omni gives each
    stage process, so it is what the processes carry. Stages that share their
    CPUs share one list, and a process with it cannot be told apart by it.
    """
    binds: dict[str, list[tuple[int, str]]] = {}
    for stage in deploy_config.get("platforms", {}).get("cpu", {}).get("stages", []):
        bind = stage.get("env", {}).get(BIND_ENV)
        if bind is not None:
            stage_id = int(stage["stage_id"])
            binds.setdefault(bind, []).append((stage_id, stage_name(stage_id)))
    return {bind: tuple(stages) for bind, stages in binds.items()}


@dataclass(frozen=True)
class StageProcess:
    """One process of the pipeline, named the way an operator needs it in an error."""

    pid: int
    role: str  # "engine core", "worker", "resource tracker", "process"
    stage_id: int | None
    stage_name: str | None

    def describe(self) -> str:
        if self.stage_id is None:
            return f"{self.role} pid {self.pid}"
        return f"stage {self.stage_id} ({self.stage_name}) {self.role} pid {self.pid}"


_STAGE_IN_TITLE = re.compile(r"_stage(\d+)_")


def _title_stage(pid: int) -> int | None:
    found = _STAGE_IN_TITLE.search(proctree.command_line(pid))
    return int(found.group(1)) if found else None


def identify(pid: int, binds: StageBinds) -> StageProcess:
    """Which stage and role `pid` has: from its title (an engine core names its stage; a
    worker's parent is its engine core), else by its bind list (the first stage with it).
    """
    command = proctree.command_line(pid)
    role = "process"
    if RESOURCE_TRACKER_MARK in command:
        role = "resource tracker"
    for marker, name in ROLE_MARKERS:
        if marker in command:
            role = name
            break
    stage_id = _title_stage(pid)
    if stage_id is None and role == "worker":
        stage_id = _title_stage(proctree.parent(pid) or 0)
    if stage_id is not None:
        return StageProcess(pid, role, stage_id, stage_name(stage_id))
    stages = binds.get(procfs.environ(pid).get(BIND_ENV, ""))
    if not stages:
        return StageProcess(pid, role, None, None)
    return StageProcess(pid, role, *stages[0])


def stage_bind(pid: int, binds: StageBinds) -> str | None:
    """The bind list of the stage `pid` belongs to (`binds`: `stage_binds`), or None.

    From its title first: a stage forked from the driver (omni_cpu.platform.fork)
    shows the driver's start environment in /proc, not its stage's; the
    environment is the fallback for a process without a stage title.
    """
    stage_id = _title_stage(pid)
    if stage_id is None and "Worker" in proctree.command_line(pid):
        stage_id = _title_stage(proctree.parent(pid) or 0)
    if stage_id is not None:
        for bind, stages in binds.items():
            if any(known == stage_id for known, _ in stages):
                return bind
        return None
    bind = procfs.environ(pid).get(BIND_ENV)
    return bind if bind in binds else None


def observed_binding(pids: list[int], binds: StageBinds) -> dict[str, list[int]]:
    """Per bind list (`binds`: `stage_binds`): the CPUs its processes' bound threads use.

    A thread counts as bound when its allowed CPUs are narrower than its process's
    main thread was given at start (vLLM's worker pins each OpenMP thread).
    """
    allowed_all = set(os.sched_getaffinity(0))
    seen: dict[str, set[int]] = {}
    for pid in pids:
        bind = stage_bind(pid, binds)
        if bind is None:
            continue
        for cpus in procfs.thread_cpus(pid).values():
            if set(cpus) < allowed_all:
                seen.setdefault(bind, set()).update(cpus)
    return {bind: sorted(cpus) for bind, cpus in seen.items()}
