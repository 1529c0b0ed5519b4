"""Per-stage CPU time (psutil) and peak memory (VmHWM), for the processes of each stage.

A process belongs to a stage by its title (vLLM-Omni names the stage in its engine
core's), else when its environment carries that stage's bind list
(`omni_cpu.process.stage_processes.stage_binds`: a spawned stage starts with its
platform env; a forked one shows the driver's). Stages that share one CPU list
cannot be told apart by the list; they are reported together under a joined name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from omni_cpu.process import procfs, proctree
from omni_cpu.process.stage_processes import StageBinds, stage_bind


def stage_groups(pids: Iterable[int], binds: StageBinds) -> dict[str, list[int]]:
    """Stage name ("talker", or "talker+code2wav" sharing CPUs) -> its processes."""
    names = {bind: "+".join(name for _, name in stages) for bind, stages in binds.items()}
    groups: dict[str, list[int]] = {name: [] for name in names.values()}
    for pid in pids:
        bind = stage_bind(pid, binds)
        if bind in names:
            groups[names[bind]].append(pid)
    return groups


def group_cpu_seconds(groups: Mapping[str, list[int]]) -> dict[str, float]:
    return {name: sum(proctree.cpu_seconds(pid) for pid in pids) for name, pids in groups.items()}


def group_peak_rss_bytes(groups: Mapping[str, list[int]]) -> dict[str, int]:
    """Sum of each process's own peak: an upper bound of the group's simultaneous peak."""
    return {name: sum(procfs.peak_rss_bytes(pid) for pid in pids) for name, pids in groups.items()}
