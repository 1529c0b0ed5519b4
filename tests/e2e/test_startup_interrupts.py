"""Start-up interrupted: the stages end within seconds, one line is printed, nothing is left.

Each test starts the tiny checkpoint's engines and stops them as soon as both stage
processes exist (loading, not serving yet): seconds of engine time each.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from omni_cpu.process import proctree
from tests.helpers.engines import OMNI_CPU, live_pids_with_token, needs_runtime
from tests.helpers.leftovers import eventually
from tests.helpers.serving import REPO, free_port

pytestmark = [pytest.mark.e2e, needs_runtime]
SHM = Path("/dev/shm")


def _engines_starting(process: subprocess.Popen[str], timeout_s: float = 600) -> set[int]:
    """Wait until both stage engine cores exist; every pid of the tree seen on the way."""
    seen: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, "exited before its engines started"
        tree = proctree.descendants(process.pid)
        seen |= set(tree)
        if sum("EngineCore" in proctree.command_line(pid) for pid in tree) >= 2:
            time.sleep(1)  # their OpenMP runtimes register in /dev/shm as they load torch
            return seen | set(proctree.descendants(process.pid))
        time.sleep(0.2)
    raise AssertionError("the engines never started")


def _openmp_files_of(pids: set[int]) -> list[str]:
    return sorted(
        name
        for name in os.listdir(SHM)
        if name.startswith("__KMP_REGISTERED_LIB_") and int(name.split("_")[5]) in pids
    )


def _stages(pids: set[int]) -> list[int]:
    return [pid for pid in pids if "EngineCore" in proctree.command_line(pid)]


def test_sigterm_during_serve_start_up_ends_the_stages_within_5_s(
    tiny_checkpoint: Path,
) -> None:
    command = [sys.executable, "-m", "omni_cpu.cli", "serve", "--model", str(tiny_checkpoint),
               "--host", "127.0.0.1", "--port", str(free_port())]  # fmt: skip
    server = subprocess.Popen(command, cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        tree = _engines_starting(server)
        stages = _stages(tree)
        stopped_at = time.monotonic()
        server.send_signal(signal.SIGTERM)
        _, stderr = server.communicate(timeout=60)
        assert proctree.wait_gone(stages, 0.1) == [] and time.monotonic() - stopped_at < 5
        assert "Traceback" not in stderr, stderr[-3000:]
        assert proctree.wait_gone(sorted(tree), 10) == []
        deadline = time.monotonic() + 10  # the watchdog sweeps once the server is gone
        while _openmp_files_of(tree) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _openmp_files_of(tree) == []
    finally:
        if server.poll() is None:
            proctree.stop_tree(server.pid, 10)


def test_sigint_during_run_start_up_prints_one_line(tiny_checkpoint: Path, tmp_path: Path) -> None:
    command = [OMNI_CPU, "run", "--model", str(tiny_checkpoint), "--text", "Hello.",
               "--out", str(tmp_path / "a.wav")]  # fmt: skip
    token = uuid.uuid4().hex  # every process of the run carries it, seen or not
    env = {**os.environ, "OMNI_CPU_E2E_TOKEN": token}
    run = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    try:
        tree = _engines_starting(run)
        run.send_signal(signal.SIGINT)
        _, stderr = run.communicate(timeout=60)
        assert run.returncode == 130, stderr[-3000:]
        assert "Traceback" not in stderr and "Exception in thread" not in stderr, stderr[-3000:]
        assert stderr.strip().splitlines()[-1] == "interrupted"
        assert proctree.wait_gone(sorted(tree), 10) == []
        assert eventually(lambda: not live_pids_with_token(token), 5)
        assert list(tmp_path.iterdir()) == []  # neither the WAV nor its partial file
    finally:
        if run.poll() is None:
            proctree.stop_tree(run.pid, 10)
