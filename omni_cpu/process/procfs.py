"""What psutil does not give, read from /proc by hand: the one place that parses it.

psutil covers process trees, CPU times, RSS, liveness and waiting for exit
(`omni_cpu.process.proctree`). It has no resident-memory high-water mark, no
per-thread affinity list, no view of which /dev/shm entries a process holds, no
OOM-kill counter, and it reads no environment of a process that rewrote its
title (every stage process does); those few reads live here, each tolerant of a
process that vanishes mid-read.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from omni_cpu.cpulist import parse_cpu_list

PROC = Path("/proc")
SHM = "/dev/shm/"  # as the kernel shows it in maps and fd links


def peak_rss_bytes(pid: int) -> int:
    """VmHWM of `pid`: its resident-memory high-water mark since it started; 0 when gone."""
    try:
        for line in (PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def reset_peak_rss() -> None:
    """Restart this process's VmHWM from its current RSS (Linux >= 4.0; else unchanged)."""
    with contextlib.suppress(OSError):
        (PROC / "self" / "clear_refs").write_text("5")


def thread_cpus(pid: int) -> dict[int, tuple[int, ...]]:
    """Each thread of `pid` -> the CPUs it may run on (Cpus_allowed_list)."""
    result: dict[int, tuple[int, ...]] = {}
    for task in (PROC / str(pid) / "task").glob("*"):
        try:
            for line in (task / "status").read_text().splitlines():
                if line.startswith("Cpus_allowed_list:"):
                    result[int(task.name)] = parse_cpu_list(line.split(":", 1)[1])
        except (OSError, ValueError):
            continue
    return result


def shm_inodes() -> dict[int, str]:
    """Each /dev/shm entry's inode -> its name: what a process's mappings are matched against."""
    found: dict[int, str] = {}
    with contextlib.suppress(OSError), os.scandir(SHM) as entries:
        for entry in entries:
            with contextlib.suppress(OSError):
                found[entry.inode()] = entry.name
    return found


def shm_names_held(pid: int, inodes: dict[int, str] | None = None) -> set[str]:
    """Names of the /dev/shm entries `pid` maps or has open (empty when it is gone).

    Matched by inode (`inodes`, default: `shm_inodes()` now), not by the path the
    kernel shows: glibc's sem_open creates a semaphore as a temporary file that it
    links to the semaphore's name and unlinks, so the creator's map shows
    `/dev/shm/sem.XXXXXX (deleted)` where the entry is `sem.mp-...` (multiprocessing's
    locks and queues; a stage killed before it unlinks its own leaves one behind).
    """
    inodes = shm_inodes() if inodes is None else inodes
    names: set[str] = set()
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in (PROC / str(pid) / "maps").read_text().splitlines():
            if SHM in line:
                name = inodes.get(int(line.split(maxsplit=5)[4]))
                if name is not None:
                    names.add(name)
    with contextlib.suppress(OSError), os.scandir(PROC / str(pid) / "fd") as fds:
        for fd in fds:
            with contextlib.suppress(OSError):
                if os.readlink(fd.path).startswith(SHM):
                    name = inodes.get(os.stat(fd.path).st_ino)
                    if name is not None:
                        names.add(name)
    return names


def mapped_files(pid: int | str = "self") -> set[str]:
    """Real paths of the files `pid` maps (its loaded libraries among them); empty when gone."""
    found: set[str] = set()
    with contextlib.suppress(OSError):
        for line in (PROC / str(pid) / "maps").read_text().splitlines():
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].startswith("/"):
                found.add(os.path.realpath(fields[5].removesuffix(" (deleted)")))
    return found


def shm_names_in_use() -> set[str]:
    """Every /dev/shm name some live process (that we may inspect) maps or holds open."""
    inodes = shm_inodes()
    names: set[str] = set()
    for entry in os.scandir(PROC):
        if entry.name.isdigit():
            names |= shm_names_held(int(entry.name), inodes)
    return names


def environ(pid: int) -> dict[str, str]:
    """The environment `pid` was started with (empty when unreadable or gone).

    Read by hand: a process that wrote its title over the block (setproctitle,
    unless SPT_NOENV is set, which `omni_cpu.process.guard` sets for every process
    it owns) leaves NULs at its start, where psutil's parser stops and returns
    nothing; the variables after the overwritten part, if any, still count.
    """
    try:
        raw = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {key.decode(errors="replace"): value.decode(errors="replace") for key, value in pairs}


def oom_kills() -> int | None:
    """The kernel's count of OOM kills since boot (/proc/vmstat oom_kill), None if unknown."""
    try:
        for line in (PROC / "vmstat").read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None
