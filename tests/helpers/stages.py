"""Stand-ins for stage processes: real processes with a stage's title and environment.

vLLM's stage processes set their title (`VLLM::EngineCore_stage0_...`) and start
with their stage's environment; a sleeping Python process whose command line
carries the title is told apart the same way (omni_cpu.process.stage_processes).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psutil

SLEEP = "import time; time.sleep(60)"


@contextmanager
def stand_in(title: str, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """A sleeping process whose command line shows `title`, as a stage's shows its role."""
    with subprocess.Popen(
        [sys.executable, "-c", SLEEP, title], env={**os.environ, **(env or {})}
    ) as child:
        try:
            # Until it runs Python: before exec the child shows our title and environment.
            deadline = time.monotonic() + 10
            while title not in " ".join(_cmdline(child.pid)) and time.monotonic() < deadline:
                time.sleep(0.02)
            yield child
        finally:
            child.kill()


def _cmdline(pid: int) -> list[str]:
    try:
        return psutil.Process(pid).cmdline()
    except psutil.Error:
        return []
