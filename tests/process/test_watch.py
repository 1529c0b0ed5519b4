"""The stage progress watch, on real processes: a stopped or idle stage holding work is hung."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from omni_cpu.process import proctree
from omni_cpu.process.stage_processes import StageProcess
from omni_cpu.process.watch import PROGRESS_CPU_S, ProgressWatch, StageWatch, is_stopped

BUSY = "while True: pass"
IDLE = "import time; time.sleep(60)"


@pytest.fixture
def spinning() -> Iterator[int]:
    with subprocess.Popen([sys.executable, "-c", BUSY]) as child:
        try:
            yield child.pid
        finally:
            os.kill(child.pid, signal.SIGCONT)
            child.kill()


def _looks(watch: ProgressWatch, stage: StageProcess, seconds: float, busy: bool) -> str | None:
    """Look every 0.1 s for `seconds`; the first stall reported, or None."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        stalled = watch.look([stage], busy=busy)
        if stalled is not None:
            return stalled
        time.sleep(0.1)
    return None


def _until(condition: Callable[[], bool], within_s: float = 30) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, "the process never got there"
        time.sleep(0.02)


def test_a_stopped_stage_holding_work_is_named_once_the_stall_time_passes(spinning: int):
    # Real processes and CPU times; the watch's clock is the test's, so what is checked is the
    # rule (named stall_s after the last progress, not before), not how the box schedules.
    talker = StageProcess(spinning, "engine core", 0, "talker")
    now = [0.0]
    watch = ProgressWatch(stall_s=0.8, clock=lambda: now[0])
    assert watch.look([talker], busy=True) is None
    start = proctree.cpu_seconds(spinning)
    _until(lambda: proctree.cpu_seconds(spinning) - start >= 2 * PROGRESS_CPU_S)
    now[0] = 1.0
    assert watch.look([talker], busy=True) is None  # it ran: progress at 1.0
    os.kill(spinning, signal.SIGSTOP)
    _until(lambda: is_stopped(spinning))
    now[0] = 1.1
    assert watch.look([talker], busy=True) is None  # stopped, 0.1 s without progress
    now[0] = 1.79
    assert watch.look([talker], busy=True) is None
    now[0] = 1.8
    stalled = watch.look([talker], busy=True)
    assert stalled is not None
    assert f"stage 0 (talker) engine core pid {spinning}" in stalled and "(stopped)" in stalled


def test_a_stopped_stage_with_no_work_is_not_a_stall(spinning: int):
    talker = StageProcess(spinning, "engine core", 0, "talker")
    watch = ProgressWatch(stall_s=0.5)
    os.kill(spinning, signal.SIGSTOP)
    assert _looks(watch, talker, 1.5, busy=False) is None


def test_work_held_while_no_stage_uses_cpu_is_a_stall():
    with subprocess.Popen([sys.executable, "-c", IDLE]) as child:
        try:
            code2wav = StageProcess(child.pid, "engine core", 1, "code2wav")
            stalled = _looks(ProgressWatch(stall_s=0.5), code2wav, 4.0, busy=True)
        finally:
            child.kill()
    assert stalled is not None and "stage 1 (code2wav)" in stalled and "(stopped)" not in stalled


def test_a_stall_time_of_zero_never_reports(spinning: int):
    talker = StageProcess(spinning, "engine core", 0, "talker")
    os.kill(spinning, signal.SIGSTOP)
    assert _looks(ProgressWatch(stall_s=0), talker, 0.5, busy=True) is None


def test_runs_alarm_interrupts_the_generating_main_thread_on_a_stall(spinning: int):
    from omni_cpu.launch.interrupts import StallAlarm

    alarm = StallAlarm(StageWatch(os.getpid(), {}, stall_s=0.6))
    alarm.watch.seen = {spinning: StageProcess(spinning, "engine core", 0, "talker")}
    alarm.working(True)  # this (main) thread is generating
    os.kill(spinning, signal.SIGSTOP)
    deadline = time.monotonic() + 5
    with pytest.raises(KeyboardInterrupt):
        while time.monotonic() < deadline:
            alarm.look()
            time.sleep(0.1)
    assert alarm.stalled is not None and "stage 0 (talker)" in alarm.stalled


def _counting_stage(folder: str, steps: bool) -> subprocess.Popen[bytes]:
    """A process that counts work steps in `folder` (the stages' own counter) while it
    spins: one step every 50 ms, or none at all (alive, burning CPU, stuck)."""
    loop = "c.step(); time.sleep(0.05)" if steps else "pass"
    code = (
        "import time; from pathlib import Path; from omni_cpu.process.progress import "
        f"StepCounter; c = StepCounter(Path({folder!r}), 'talker')\nwhile True: {loop}"
    )
    return subprocess.Popen([sys.executable, "-c", code])


def _watch_steps(folder: str, child: subprocess.Popen[bytes], seconds: float) -> str | None:
    from pathlib import Path

    from omni_cpu.process.progress import read_steps

    deadline = time.monotonic() + 10
    while child.pid not in read_steps(Path(folder)) and time.monotonic() < deadline:
        time.sleep(0.05)
    talker = StageProcess(child.pid, "engine core", 0, "talker")
    watch = ProgressWatch(stall_s=0.8, steps=lambda: read_steps(Path(folder)))
    return _looks(watch, talker, seconds, busy=True)


def test_a_stage_that_burns_cpu_but_makes_no_steps_while_holding_work_is_a_stall(tmp_path):
    with _counting_stage(str(tmp_path), steps=False) as child:
        try:
            stalled = _watch_steps(str(tmp_path), child, 4.0)
        finally:
            child.kill()
    assert stalled is not None and f"stage 0 (talker) engine core pid {child.pid}" in stalled
    assert "(stopped)" not in stalled


def test_a_stage_that_makes_steps_is_not_a_stall(tmp_path):
    with _counting_stage(str(tmp_path), steps=True) as child:
        try:
            assert _watch_steps(str(tmp_path), child, 2.0) is None
        finally:
            child.kill()


def test_a_run_progress_folder_left_by_a_killed_run_goes_with_the_next_run(tmp_path):
    from omni_cpu.process.progress import RUN_PREFIX, run_progress_dir

    with subprocess.Popen([sys.executable, "-c", "pass"]) as gone:
        gone.wait()
    stale = tmp_path / f"{RUN_PREFIX}{gone.pid}"
    stale.mkdir()
    (stale / "talker-1.steps").write_bytes(b"\0" * 8)
    alive = tmp_path / f"{RUN_PREFIX}1"  # pid 1 runs: not ours to judge
    alive.mkdir()
    mine = run_progress_dir(tmp_path)
    assert mine == tmp_path / f"{RUN_PREFIX}{os.getpid()}" and mine.is_dir()
    assert not stale.exists() and alive.exists()


def test_an_oom_kill_since_the_watch_began_is_named_with_the_memory_limit():
    from omni_cpu.process import procfs

    now = procfs.oom_kills()
    if now is None:
        pytest.skip("this kernel does not count OOM kills")
    watch = StageWatch(os.getpid(), {}, stall_s=0)
    watch.oom_kills_before = now
    assert watch.oom_note() == ""
    watch.oom_kills_before = now - 1  # the kernel killed one since
    note = watch.oom_note()
    assert note.startswith("; the kernel's OOM killer ran (") and "memory limit" in note
