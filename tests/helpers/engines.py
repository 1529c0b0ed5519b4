"""`omni-cpu` run as a user runs it, and what its processes did meanwhile.

The tiny checkpoint these runs take is the `tiny_checkpoint` fixture (tests/conftest.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from omni_cpu.cpulist import format_cpu_list
from omni_cpu.process import procfs, proctree

OMNI_CPU = str(Path(sys.executable).with_name("omni-cpu"))
RUNTIME_MISSING = importlib.util.find_spec("vllm_omni") is None
needs_runtime = pytest.mark.skipif(
    RUNTIME_MISSING, reason="the inference runtime is not installed (scripts/install-runtime.sh)"
)


_STAGE_IN_TITLE = re.compile(r"EngineCore\w*_stage(\d+)_")


def stage_of(pid: int) -> int | None:
    """The stage whose engine core `pid` is, by the title vLLM-Omni gives it; else None.

    Not by the environment: a stage forked from the driver shows the driver's there.
    """
    found = _STAGE_IN_TITLE.search(proctree.command_line(pid))
    return int(found.group(1)) if found else None


def thread_cpu_lists(pid: int) -> list[str]:
    """The allowed CPUs of every thread of `pid`, in kernel list syntax."""
    return [format_cpu_list(cpus) for cpus in procfs.thread_cpus(pid).values()]


def live_pids_with_token(token: str) -> list[int]:
    """Processes (not zombies) whose environment carries `token`."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                continue
            if procfs.environ(process.pid).get("OMNI_CPU_E2E_TOKEN") == token:
                found.append(process.pid)
        except psutil.Error:
            continue
    return found


@dataclass
class Run:
    """A finished `omni-cpu` command and what was seen of its processes while it ran."""

    returncode: int
    stdout: str
    stderr: str
    token: str
    # stage id (from its engine core's title) -> Cpus_allowed_list of its threads
    thread_cpus_by_stage: dict[int, set[str]] = field(default_factory=dict)
    # how each stage process was seen to start: "fork" (its /proc environ is the
    # driver's start environment) or "spawn" (its own, with its stage's binding)
    stage_starts: set[str] = field(default_factory=set)

    def json(self) -> dict:
        return json.loads(self.stdout)


def run_omni_cpu(*args: str, timeout_s: float = 900, env: dict[str, str] | None = None) -> Run:
    """Run `omni-cpu ARGS` to completion, sampling its stage processes' threads meanwhile."""
    token = uuid.uuid4().hex
    env = {**os.environ, **(env or {}), "OMNI_CPU_E2E_TOKEN": token}
    process = subprocess.Popen(
        [OMNI_CPU, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    seen: dict[int, set[str]] = {}
    starts: set[str] = set()
    deadline = time.monotonic() + timeout_s
    import threading

    out: dict[str, str] = {}

    def drain() -> None:  # keep the pipes empty so the command never blocks on them
        out["stdout"], out["stderr"] = process.communicate()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    while reader.is_alive() and time.monotonic() < deadline:
        for pid in proctree.descendants(process.pid):
            stage = stage_of(pid)
            if stage is not None:
                seen.setdefault(stage, set()).update(thread_cpu_lists(pid))
                environ = procfs.environ(pid)
                if environ:
                    starts.add("fork" if environ == procfs.environ(process.pid) else "spawn")
        time.sleep(0.5)
    if reader.is_alive():
        process.kill()
        reader.join()
        pytest.fail(f"omni-cpu {' '.join(args)} ran over {timeout_s} s")
    return Run(process.returncode, out["stdout"], out["stderr"], token, seen, starts)
