"""Stage processes: find them, read their CPU binding, and say which stage each one is.

Walking and stopping process trees is `omni_cpu.process.proctree`'s job (which
`serve` uses too); this module adds what is specific to stage processes.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from omni_cpu.process import procfs, proctree

# What each stage process shows as its title (vLLM's setproctitle) -> what it is.
ROLE_MARKERS = (("EngineCore", "engine core"), ("Worker", "worker"))
RESOURCE_TRACKER_MARK = "multiprocessing.resource_tracker"


def descendant_pids(pid: int | None = None) -> list[int]:
    """Every live descendant of `pid` (default: this process)."""
    return proctree.descendants(os.getpid() if pid is None else pid)


def thread_cpus(pid: int) -> dict[int, tuple[int, ...]]:
    """Each thread of `pid` -> the CPUs it may run on."""
    return procfs.thread_cpus(pid)


def process_env(pid: int) -> dict[str, str]:
    """The environment `pid` was started with (empty if unreadable)."""
    return proctree.environ(pid)


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


def identify(
    pid: int, stage_binds: dict[str, tuple[int, str]], stage_names: dict[int, str] | None = None
) -> StageProcess:
    """Which stage and role `pid` has: from its title (an engine core names its stage; a
    worker's parent is its engine core), else by its `VLLM_CPU_OMP_THREADS_BIND`.

    `stage_binds`: bind list -> (stage id, stage name); stages sharing one list
    cannot be told apart by it, and the first one named wins.
    """
    command = proctree.command_line(pid)
    role = "process"
    if RESOURCE_TRACKER_MARK in command:
        role = "resource tracker"
    for marker, name in ROLE_MARKERS:
        if marker in command:
            role = name
            break
    names = dict(stage_names or {})
    for stage_id, name in stage_binds.values():
        names.setdefault(stage_id, name)
    stage_id = _title_stage(pid)
    if stage_id is None and role == "worker":
        stage_id = _title_stage(proctree.parent(pid) or 0)
    if stage_id is not None:
        return StageProcess(pid, role, stage_id, names.get(stage_id, f"stage{stage_id}"))
    stage = stage_binds.get(process_env(pid).get("VLLM_CPU_OMP_THREADS_BIND", ""))
    if stage is None:
        return StageProcess(pid, role, None, None)
    return StageProcess(pid, role, stage[0], stage[1])


def stage_bind(pid: int, binds: dict[int, str]) -> str | None:
    """The bind list (`binds`: stage id -> VLLM_CPU_OMP_THREADS_BIND) of `pid`'s stage, or None.

    From its title first: a stage forked from the driver (omni_cpu.platform.fork)
    shows the driver's start environment in /proc, not its stage's.
    """
    stage_id = _title_stage(pid)
    if stage_id is None and "Worker" in proctree.command_line(pid):
        stage_id = _title_stage(proctree.parent(pid) or 0)
    if stage_id is not None:
        return binds.get(stage_id)
    bind = process_env(pid).get("VLLM_CPU_OMP_THREADS_BIND")
    return bind if bind in binds.values() else None


def observed_binding(pids: list[int], binds: dict[int, str]) -> dict[str, list[int]]:
    """Per stage bind list (`binds`: stage id -> VLLM_CPU_OMP_THREADS_BIND): the CPUs its
    processes' bound threads use.

    A thread counts as bound when its allowed CPUs are narrower than its process's
    main thread was given at start (vLLM's worker pins each OpenMP thread).
    """
    allowed_all = set(os.sched_getaffinity(0))
    seen: dict[str, set[int]] = {}
    for pid in pids:
        bind = stage_bind(pid, binds)
        if bind is None:
            continue
        for cpus in thread_cpus(pid).values():
            if set(cpus) < allowed_all:
                seen.setdefault(bind, set()).update(cpus)
    return {bind: sorted(cpus) for bind, cpus in seen.items()}


def terminate(pids: list[int], timeout_s: float = 10.0) -> list[int]:
    """SIGTERM, wait, then SIGKILL what is left; returns the pids that had to be killed."""
    return proctree.terminate(pids, timeout_s)
