"""Nothing a guarded owner starts outlives it: children, their shared memory, partial outputs.

Real processes, real /dev/shm segments: the owner (tests/process/owner.py) spawns a
child that ignores SIGTERM and holds a 1 MiB segment, as vLLM's stage processes do.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from omni_cpu.process import proctree, shm
from tests.helpers.leftovers import eventually

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not shm.SHM_DIR.is_dir(), reason="no /dev/shm")


def start_owner(mode: str, folder: Path) -> tuple[subprocess.Popen[str], int, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    owner = subprocess.Popen(
        [sys.executable, "-m", "tests.process.owner", mode, str(folder)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert owner.stdout is not None
    pid, name = owner.stdout.readline().split()
    return owner, int(pid), name


def ledgers_listing(name: str) -> set[Path]:
    """The watchdogs' ledgers that recorded `name`."""
    paths = set(shm.SHM_DIR.glob(f"{shm.LEDGER_PREFIX}*{shm.LEDGER_SUFFIX}"))
    return {path for path in paths if (ledger := shm.Ledger.load(path)) and name in ledger.names}


# spawned children carry the owner's token; forked ones ("fork-") only the mark of the
# driver they were forked from (omni_cpu.platform.fork), and a copy of the owner's
# socket to its watchdog.
@pytest.mark.parametrize(
    "mode",
    ["wait", "titled", "fork-wait", "fork-titled"],
    ids=[
        "a segment",
        "a titled stage's lost semaphore",
        "a forked child's segment",
        "a forked titled stage's lost semaphore",
    ],
)
def test_a_killed_owner_takes_its_children_and_their_shared_memory_along(
    mode: str, tmp_path: Path
) -> None:
    owner, child, name = start_owner(mode, tmp_path)
    try:
        assert (shm.SHM_DIR / name).exists()
        assert eventually(lambda: bool(ledgers_listing(name)), 20)  # the watchdog recorded it
        ledgers = ledgers_listing(name)
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait()
        assert eventually(lambda: not proctree.is_running(child), 20)
        assert eventually(lambda: not (shm.SHM_DIR / name).exists(), 20)
        assert eventually(lambda: not any(path.exists() for path in ledgers), 20)
    finally:
        if owner.poll() is None:
            owner.kill()
        (shm.SHM_DIR / name).unlink(missing_ok=True)


def test_a_titled_stage_keeps_the_token_in_its_environment(tmp_path: Path) -> None:
    from omni_cpu import envs
    from omni_cpu.process import procfs

    owner, child, name = start_owner("titled", tmp_path)
    try:
        assert proctree.command_line(child).startswith("VLLM::StageEngineCoreProc_stage0_")
        assert procfs.environ(child).get(envs.OWNER.name)
    finally:
        owner.kill()
        owner.wait()
        eventually(lambda: not proctree.is_running(child), 20)
        (shm.SHM_DIR / name).unlink(missing_ok=True)


@pytest.mark.parametrize("start", ["", "fork-"], ids=["spawned", "forked"])
def test_a_clean_exit_leaves_no_segment_and_no_ledger(tmp_path: Path, start: str) -> None:
    # A marked owner carries its own mark: its watchdog must not stop the owner itself.
    owner, child, segment = start_owner(f"{start}exit", tmp_path)
    assert owner.wait(timeout=60) == 0
    assert not proctree.is_running(child)
    assert eventually(lambda: not (shm.SHM_DIR / segment).exists(), 20)


def test_a_partial_file_of_a_dead_writer_is_swept_at_the_next_start(tmp_path: Path) -> None:
    from omni_cpu.process.guard import StageGuard

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
    from omni_cpu.runtime.doctor import check_shared_memory

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


def _zombie() -> subprocess.Popen[bytes]:
    """A child that has exited and is not reaped yet, as killed stages are under a subreaper."""
    child = subprocess.Popen(["true"])
    assert eventually(lambda: psutil_status(child.pid) == "zombie", 10)
    return child


def psutil_status(pid: int) -> str:
    import psutil

    try:
        return psutil.Process(pid).status()
    except psutil.Error:
        return "gone"


def test_an_openmp_file_of_a_killed_but_unreaped_stage_is_swept(tmp_path: Path) -> None:
    zombie = _zombie()
    name = f"__KMP_REGISTERED_LIB_{zombie.pid}_{os.getuid()}"
    (shm.SHM_DIR / name).write_bytes(b"0x1-libiomp5.so")
    ledger = shm.Ledger(f"test{os.getpid()}", zombie.pid, zombie.pid, {zombie.pid}, {name})
    try:
        assert name in {entry.name for entry in shm.leftovers(ledger, set())}
        shm.sweep(ledger)
        assert not (shm.SHM_DIR / name).exists()
    finally:
        zombie.wait()
        (shm.SHM_DIR / name).unlink(missing_ok=True)
        ledger.path.unlink(missing_ok=True)


def test_an_openmp_file_no_ledger_names_is_reported_and_swept_at_the_next_start(
    tmp_path: Path,
) -> None:
    from omni_cpu.process.guard import StageGuard
    from omni_cpu.runtime.doctor import check_shared_memory

    dead = subprocess.Popen(["true"])
    dead.wait()
    name = f"__KMP_REGISTERED_LIB_{dead.pid}_{os.getuid()}"
    (shm.SHM_DIR / name).write_bytes(b"0x1-libiomp5.so")
    try:
        assert check_shared_memory().status == "warn"
        assert name in {entry.name for entry in shm.stale()}  # what doctor lists
        with StageGuard([tmp_path]):
            assert not (shm.SHM_DIR / name).exists()
    finally:
        (shm.SHM_DIR / name).unlink(missing_ok=True)
