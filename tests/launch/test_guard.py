"""Nothing a guarded owner starts outlives it: children, their shared memory, partial outputs.

Real processes, real /dev/shm segments: the owner (tests/launch/owner.py) spawns a
child that ignores SIGTERM and holds a 1 MiB segment, as vLLM's stage processes do.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from omni_cpu.launch import proctree, shm

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not shm.SHM_DIR.is_dir(), reason="no /dev/shm")


def start_owner(mode: str, folder: Path) -> tuple[subprocess.Popen[str], int, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    owner = subprocess.Popen(
        [sys.executable, "-m", "tests.launch.owner", mode, str(folder)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert owner.stdout is not None
    pid, name = owner.stdout.readline().split()
    return owner, int(pid), name


def gone_within(seconds: float, check) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return check()


def test_a_killed_owner_takes_its_children_and_their_shared_memory_along(tmp_path: Path) -> None:
    owner, child, segment = start_owner("wait", tmp_path)
    assert (shm.SHM_DIR / segment).exists()

    def ledgers_listing_it() -> set[Path]:
        paths = set(shm.SHM_DIR.glob(f"{shm.LEDGER_PREFIX}*{shm.LEDGER_SUFFIX}"))
        return {p for p in paths if (ledger := shm.Ledger.load(p)) and segment in ledger.names}

    assert gone_within(20, lambda: bool(ledgers_listing_it()))  # the watchdog recorded it
    ledgers = ledgers_listing_it()
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait()
    assert gone_within(20, lambda: not proctree.is_running(child))
    assert gone_within(20, lambda: not (shm.SHM_DIR / segment).exists())
    assert gone_within(20, lambda: not any(path.exists() for path in ledgers))


def test_a_clean_exit_leaves_no_segment_and_no_ledger(tmp_path: Path) -> None:
    owner, child, segment = start_owner("exit", tmp_path)
    assert owner.wait(timeout=60) == 0
    assert not proctree.is_running(child)
    assert gone_within(20, lambda: not (shm.SHM_DIR / segment).exists())


def test_a_partial_file_of_a_dead_writer_is_swept_at_the_next_start(tmp_path: Path) -> None:
    from omni_cpu.launch.guard import StageGuard

    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f".out.wav.omni-cpu-{dead.pid}.partial"
    stale.write_bytes(b"RIFF")
    mine = tmp_path / f".out.wav.omni-cpu-{os.getpid()}.partial"
    mine.write_bytes(b"RIFF")
    with StageGuard([tmp_path]):
        assert not stale.exists()
        assert mine.exists()  # a live writer's file is left alone


def test_doctor_reports_what_a_finished_run_left_and_how_much_it_holds(tmp_path: Path) -> None:
    from omni_cpu.doctor import check_shared_memory

    name = f"psm_omni_cpu_test_{os.getpid()}"
    (shm.SHM_DIR / name).write_bytes(b"\0" * (1 << 20))
    dead = subprocess.Popen(["true"])
    dead.wait()
    ledger = shm.Ledger(f"test{os.getpid()}", dead.pid, dead.pid, {dead.pid}, {name})
    ledger.save()
    try:
        check = check_shared_memory()
        assert check.status == "warn"
        assert name in check.detail and "1.0 MiB" in check.detail
        assert shm.sweep(ledger) == 1 << 20
        assert not (shm.SHM_DIR / name).exists()
        assert name not in check_shared_memory().detail
    finally:
        (shm.SHM_DIR / name).unlink(missing_ok=True)
        ledger.path.unlink(missing_ok=True)
