"""What psutil does not give, read from /proc by hand: the one place that parses it.

psutil covers process trees, CPU times, RSS, environments and waiting for exit
(`omni_cpu.process.proctree`). It has no resident-memory high-water mark, no
per-thread affinity list, no view of which /dev/shm entries a process holds, no
OOM-kill counter, and it reads no environment of a process that rewrote its
title; those few reads live here, each tolerant of a process that
vanishes mid-read.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import psutil

from omni_cpu.cpulist import parse_cpu_list

PROC = Path("/proc")
SHM = "/dev/shm/"


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


def shm_names_held(pid: int) -> set[str]:
    """Names of the /dev/shm entries `pid` maps or has open (empty when it is gone)."""
    names: set[str] = set()
    with contextlib.suppress(OSError):
        for line in (PROC / str(pid) / "maps").read_text().splitlines():
            at = line.find(SHM)
            if at >= 0:
                names.add(line[at + len(SHM) :].removesuffix(" (deleted)").strip())
    with contextlib.suppress(OSError):
        for fd in os.scandir(PROC / str(pid) / "fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(fd.path)
                if target.startswith(SHM):
                    names.add(target[len(SHM) :].removesuffix(" (deleted)"))
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
    names: set[str] = set()
    for entry in os.scandir(PROC):
        if entry.name.isdigit():
            names |= shm_names_held(int(entry.name))
    return names


def environ(pid: int) -> dict[str, str]:
    """The environment `pid` was started with (empty when unreadable or gone).

    Read by hand: vLLM's stage processes set their title with setproctitle, which
    overwrites the start of the block, and psutil's parser then returns nothing;
    the variables after the overwritten part are intact and still count.
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


def pid_running(pid: int, proc: str = "/proc") -> bool:
    """Whether `pid` exists and is not a zombie (a zombie runs no code and holds no file).

    A killed stage under a subreaper (`serve`) stays a zombie until it is reaped.
    """
    try:
        with open(f"{proc}/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except (FileNotFoundError, ProcessLookupError):
        return False
    except OSError:
        return psutil.pid_exists(pid)
    # The state follows the command name, which may itself hold ") ".
    state = stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3]
    return state not in (b"Z", b"X")
