"""Per-stage CPU time (psutil) and peak memory (VmHWM), for the processes of each stage.

A process belongs to a stage when its environment carries that stage's bind list
(`omni_cpu.process.stage_processes.stage_binds`: vLLM-Omni starts each stage with
its platform env, and the stage's engine core and worker inherit it). Stages that
share one CPU list cannot be told apart; they are reported together under a
joined name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from omni_cpu.process import procfs, proctree
from omni_cpu.process.stage_processes import BIND_ENV, StageBinds


def stage_groups(pids: Iterable[int], binds: StageBinds) -> dict[str, list[int]]:
    """Stage name ("talker", or "talker+code2wav" sharing CPUs) -> its processes."""
    names = {bind: "+".join(name for _, name in stages) for bind, stages in binds.items()}
    groups: dict[str, list[int]] = {name: [] for name in names.values()}
    for pid in pids:
        bind = procfs.environ(pid).get(BIND_ENV)
        if bind in names:
            groups[names[bind]].append(pid)
    return groups


def group_cpu_seconds(groups: Mapping[str, list[int]]) -> dict[str, float]:
    return {name: sum(proctree.cpu_seconds(pid) for pid in pids) for name, pids in groups.items()}


def group_peak_rss_bytes(groups: Mapping[str, list[int]]) -> dict[str, int]:
    """Sum of each process's own peak: an upper bound of the group's simultaneous peak."""
    return {name: sum(procfs.peak_rss_bytes(pid) for pid in pids) for name, pids in groups.items()}
