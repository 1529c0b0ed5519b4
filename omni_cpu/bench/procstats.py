"""Per-stage CPU time (psutil) and peak memory (VmHWM), for the processes of each stage.

A process belongs to a stage by its title (vLLM-Omni names the stage in its engine
core's), else when its environment carries that stage's `VLLM_CPU_OMP_THREADS_BIND`
(a spawned stage starts with its platform env; a forked one shows the driver's).
Stages that share one CPU list are reported together under a joined name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from omni_cpu.process import procfs, proctree, stage_processes


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of `pid` (all its threads); 0 when it is gone."""
    return proctree.cpu_seconds(pid)


def peak_rss_bytes(pid: int) -> int:
    """Resident-memory high-water mark of `pid` since it started."""
    return procfs.peak_rss_bytes(pid)


def reset_peak_rss() -> None:
    """Restart this process's peak RSS from its current RSS.

    The triad's arrays are freed before the engines start; without this the driver's
    peak would report them instead of what serving costs.
    """
    procfs.reset_peak_rss()


def stage_groups(
    pids: Iterable[int], stage_cpus: Mapping[str, str], stage_ids: Mapping[str, int]
) -> dict[str, list[int]]:
    """Stage name -> its processes; `stage_cpus`: name -> bind list, `stage_ids`: name -> id."""
    names_by_cpus: dict[str, list[str]] = {}
    for name, cpus in stage_cpus.items():
        names_by_cpus.setdefault(cpus, []).append(name)
    groups: dict[str, list[int]] = {"+".join(names): [] for names in names_by_cpus.values()}
    binds = {stage_ids[name]: cpus for name, cpus in stage_cpus.items()}
    for pid in pids:
        bind = stage_processes.stage_bind(pid, binds)
        if bind in names_by_cpus:
            groups["+".join(names_by_cpus[bind])].append(pid)
    return groups


def group_cpu_seconds(groups: Mapping[str, list[int]]) -> dict[str, float]:
    return {name: sum(cpu_seconds(pid) for pid in pids) for name, pids in groups.items()}


def group_peak_rss_bytes(groups: Mapping[str, list[int]]) -> dict[str, int]:
    """Sum of each process's own peak: an upper bound of the group's simultaneous peak."""
    return {name: sum(peak_rss_bytes(pid) for pid in pids) for name, pids in groups.items()}
