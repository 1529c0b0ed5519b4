"""Stage processes: find them, read their CPU binding, and make sure none outlive `run`.

Walking and stopping process trees is `omni_cpu.launch.proctree`'s job (which
`serve` uses too); this module adds what is specific to stage processes.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from omni_cpu.cpulist import parse_cpu_list
from omni_cpu.launch import proctree


def descendant_pids(pid: int | None = None) -> list[int]:
    """Every live descendant of `pid` (default: this process), from /proc."""
    return proctree.descendants(os.getpid() if pid is None else pid)


def thread_cpus(pid: int) -> dict[int, tuple[int, ...]]:
    """Each thread of `pid` -> the CPUs it may run on (Cpus_allowed_list)."""
    result: dict[int, tuple[int, ...]] = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            for line in (task / "status").read_text().splitlines():
                if line.startswith("Cpus_allowed_list:"):
                    result[int(task.name)] = parse_cpu_list(line.split(":", 1)[1])
        except OSError:
            continue
    return result


def process_env(pid: int) -> dict[str, str]:
    """The environment `pid` was started with (empty if unreadable)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {key.decode(errors="replace"): value.decode(errors="replace") for key, value in pairs}


def observed_binding(pids: list[int]) -> dict[str, list[int]]:
    """Per `VLLM_CPU_OMP_THREADS_BIND` value: the CPUs its processes' bound threads use.

    A thread counts as bound when its allowed CPUs are narrower than its process's
    main thread was given at start (vLLM's worker pins each OpenMP thread).
    """
    allowed_all = set(os.sched_getaffinity(0))
    seen: dict[str, set[int]] = {}
    for pid in pids:
        bind = process_env(pid).get("VLLM_CPU_OMP_THREADS_BIND")
        if bind is None:
            continue
        for cpus in thread_cpus(pid).values():
            if set(cpus) < allowed_all:
                seen.setdefault(bind, set()).update(cpus)
    return {bind: sorted(cpus) for bind, cpus in seen.items()}


def terminate(pids: list[int], timeout_s: float = 10.0) -> list[int]:
    """SIGTERM, wait, then SIGKILL what is left; returns the pids that had to be killed."""
    proctree.signal_all(pids, signal.SIGTERM)
    stubborn = proctree.wait_gone(pids, timeout_s)
    proctree.signal_all(stubborn, signal.SIGKILL)
    proctree.wait_gone(stubborn, 5.0)
    return stubborn
