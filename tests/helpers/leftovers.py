"""What a finished run may not leave: checks that wait a bounded while for the sweep to end.

A run's watchdog sweeps /dev/shm within seconds of its owner's exit, so the checks
poll, up to a limit, rather than look once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection
from pathlib import Path

from omni_cpu.process import proctree, shm

SHM = Path("/dev/shm")


def eventually(check: Callable[[], bool], seconds: float = 10.0) -> bool:
    """Whether `check` holds within `seconds` (polled every 0.1 s)."""
    deadline = time.monotonic() + seconds
    while not check() and time.monotonic() < deadline:
        time.sleep(0.1)
    return check()


def new_shm_entries(before: set[str], tree: Collection[int] = ()) -> list[str]:
    """/dev/shm entries made since `before`, less what others still running own: the
    ledgers of runs still going (a concurrent test's) and the names those list, and the
    OpenMP registration files of live processes outside `tree`, the pids of the run
    being checked (another test's or session's torch)."""
    others: set[str] = set()
    for ledger in shm.live_ledgers():
        others |= {ledger.path.name, *ledger.names}
    new = sorted(set(os.listdir(SHM)) - before - others)
    return [name for name in new if not _someone_elses_openmp_file(name, tree)]


def _someone_elses_openmp_file(name: str, tree: Collection[int]) -> bool:
    if not name.startswith("__KMP_REGISTERED_LIB_"):
        return False
    pid = int(name.split("_")[5])
    return pid not in tree and proctree.is_running(pid)
