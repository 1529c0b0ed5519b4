"""What a finished run may not leave: checks that wait a bounded while for the sweep to end.

A run's watchdog sweeps /dev/shm within seconds of its owner's exit, so the checks
poll, up to a limit, rather than look once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from omni_cpu.process import shm

SHM = Path("/dev/shm")


def eventually(check: Callable[[], bool], seconds: float = 10.0) -> bool:
    """Whether `check` holds within `seconds` (polled every 0.1 s)."""
    deadline = time.monotonic() + seconds
    while not check() and time.monotonic() < deadline:
        time.sleep(0.1)
    return check()


def new_shm_entries(before: set[str]) -> list[str]:
    """/dev/shm entries made since `before`, less what runs still going own (a concurrent
    test's): their ledgers and the names those list."""
    others: set[str] = set()
    for ledger in shm.live_ledgers():
        others |= {ledger.path.name, *ledger.names}
    return sorted(set(os.listdir(SHM)) - before - others)
