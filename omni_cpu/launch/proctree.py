"""Process-tree helpers: find, signal and reap everything `run` or `serve` started.

vLLM-Omni's API server spawns an engine-core process per stage, which spawn
workers. If the API server dies first, those are re-parented; as a child
subreaper the supervisor becomes their parent instead of init, so it can still
see them (by parent links in /proc), stop them and reap them.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> bool:
    libc_name = ctypes.util.find_library("c")
    if libc_name is None:
        return False
    libc = ctypes.CDLL(libc_name, use_errno=True)
    return libc.prctl(option, value, 0, 0, 0) == 0


def become_subreaper() -> bool:
    """Orphaned descendants re-parent to this process (Linux ≥ 3.4); False where unsupported."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def die_with_parent(sig: int = signal.SIGTERM) -> bool:
    """In a child (e.g. preexec_fn): get `sig` when the parent dies, so a killed supervisor
    does not leave a server behind."""
    return _prctl(PR_SET_PDEATHSIG, int(sig))


def _stat_fields(pid: int, proc: Path) -> tuple[str, int] | None:
    """(state, ppid) of a process, or None when it is gone."""
    try:
        text = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may itself contain spaces or ')'.
    rest = text[text.rfind(")") + 2 :].split()
    try:
        return rest[0], int(rest[1])
    except (IndexError, ValueError):
        return None


def descendants(root: int, proc: Path = Path("/proc")) -> list[int]:
    """Every live descendant of `root` (not `root` itself), parents before children."""
    children: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name), proc)
        if fields is not None:
            children.setdefault(fields[1], []).append(int(entry.name))
    found: list[int] = []
    frontier = [root]
    while frontier:
        pid = frontier.pop(0)
        for child in sorted(children.get(pid, [])):
            found.append(child)
            frontier.append(child)
    return found


def is_running(pid: int, proc: Path = Path("/proc")) -> bool:
    """True while `pid` exists and is not a zombie."""
    fields = _stat_fields(pid, proc)
    return fields is not None and fields[0] not in ("Z", "X")


def signal_all(pids: list[int], sig: int) -> None:
    """Send `sig` to each pid that still exists."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def reap(pids: list[int]) -> None:
    """Collect the exit status of any of `pids` that are finished children of this process."""
    for pid in pids:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def wait_gone(pids: list[int], timeout_s: float, poll_s: float = 0.1) -> list[int]:
    """Wait until none of `pids` runs (reaping our own); the ones still running after."""
    deadline = time.monotonic() + timeout_s
    while True:
        reap(pids)
        alive = [pid for pid in pids if is_running(pid)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(poll_s)


def stop_tree(root: int, timeout_s: float, *, include_adopted: bool = False) -> list[int]:
    """SIGTERM `root`, then SIGKILL whatever of its tree is left after `timeout_s`.

    The tree is snapshotted before the signal, so processes re-parented when their
    parent dies stay tracked. `include_adopted`: also stop every descendant of this
    process (right for a supervisor whose only child is `root`, as a subreaper).
    Returns the pids still running after SIGKILL (empty when the tree is gone).
    """
    tree = set([root, *descendants(root)])
    signal_all([root], signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while True:
        tree |= set(descendants(root))  # children started during shutdown count too
        if include_adopted:
            tree |= set(descendants(os.getpid()))
        alive = wait_gone(sorted(tree), 0.0)
        if not alive or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    if alive:
        signal_all(alive, signal.SIGKILL)
        alive = wait_gone(alive, 5.0)
    return alive


def command_line(pid: int, proc: Path = Path("/proc")) -> str:
    """A process's command line (as set by setproctitle too), or "" when it is gone."""
    try:
        return (
            (proc / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


def pin_threads(pid: int, cpus: tuple[int, ...], proc: Path = Path("/proc")) -> bool:
    """Set the affinity of every thread of `pid` (taskset -a -p); False if it could not."""
    try:
        tids = [int(task.name) for task in (proc / str(pid) / "task").iterdir()]
    except OSError:
        return False
    done = False
    for tid in tids:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(tid, cpus)
            done = True
    return done
