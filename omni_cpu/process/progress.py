"""Each stage's work steps, counted where the stall watch can read them: progress as work done.

CPU time is no measure of progress: an idle engine core's poll loop burns about
0.025 CPU-s/s, so a stage deadlocked with work in flight looks busy. With
`OMNI_CPU_STAGE_PROGRESS_DIR` set, each stage's model runner counts the engine steps
that did work (scheduled tokens: talker frames, code2wav chunks) in
`DIR/<stage kind>-<pid>.steps`, 8 bytes (a little-endian count) mapped in memory, so
counting costs no system call; the watch reads the files.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import shutil
import struct
import tempfile
from pathlib import Path

from omni_cpu import envs
from omni_cpu.process import proctree

_COUNT = struct.Struct("<Q")
SUFFIX = ".steps"
RUN_PREFIX = "omni-cpu-progress-"  # `run`'s folder in the temp directory, per driver pid


class StepCounter:
    """This process's work-step count, in its file under `directory`."""

    def __init__(self, directory: Path, kind: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{kind}-{os.getpid()}{SUFFIX}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.ftruncate(fd, _COUNT.size)
            self._map = mmap.mmap(fd, _COUNT.size)
        finally:
            os.close(fd)
        self.count = 0

    def step(self) -> None:
        """One more step that did work."""
        self.count += 1
        _COUNT.pack_into(self._map, 0, self.count)


def step_counter_from_env(kind: str) -> StepCounter | None:
    """A counter for this stage process when `OMNI_CPU_STAGE_PROGRESS_DIR` names a folder."""
    directory = envs.OMNI_CPU_STAGE_PROGRESS_DIR
    if not directory:
        return None
    try:
        return StepCounter(Path(directory), kind)
    except OSError:  # the watch falls back to CPU time for this stage
        return None


def read_steps(directory: Path) -> dict[int, int]:
    """Work steps counted so far, by stage process id (files of gone processes included)."""
    counts: dict[int, int] = {}
    try:
        entries = list(directory.glob(f"*{SUFFIX}"))
    except OSError:
        return counts
    for path in entries:
        pid = path.name[: -len(SUFFIX)].rsplit("-", 1)[-1]
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if pid.isdigit() and len(data) == _COUNT.size:
            counts[int(pid)] = _COUNT.unpack(data)[0]
    return counts


def run_progress_dir(temp_dir: Path | None = None) -> Path:
    """A folder for this process's stages to count in (`run`; serve keeps its own folder).

    Named for this process, so a run that was killed leaves a folder the next run
    removes (its process is gone), as serve's folders are swept.
    """
    base = Path(tempfile.gettempdir()) if temp_dir is None else temp_dir
    for entry in base.glob(f"{RUN_PREFIX}*"):
        pid = entry.name[len(RUN_PREFIX) :]
        if not pid.isdigit() or int(pid) == os.getpid() or proctree.is_running(int(pid)):
            continue
        with contextlib.suppress(OSError):
            if entry.stat().st_uid == os.getuid():
                shutil.rmtree(entry)
    folder = base / f"{RUN_PREFIX}{os.getpid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder
