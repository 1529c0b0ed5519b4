"""Process trees through psutil: find, signal, wait for and measure what `run` or `serve` started.

vLLM-Omni's driver (or API server) spawns an engine-core process per stage, which
spawn workers; Python adds a resource tracker. If a parent dies first, its
children are re-parented; as a child subreaper the supervisor becomes their
parent instead of init, so it can still see them, stop them and reap them.
What psutil lacks (peak RSS, per-thread affinity, /dev/shm use, the
environment of a process that rewrote its title) is in `omni_cpu.process.procfs`.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import time

import psutil

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


def descendants(root: int) -> list[int]:
    """Every live descendant of `root` (not `root` itself), parents before children."""
    try:
        children = psutil.Process(root).children(recursive=True)
    except psutil.Error:
        return []
    return [child.pid for child in children if _alive(child)]


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def is_running(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        return _alive(psutil.Process(pid))
    except psutil.Error:
        return False


def signal_all(pids: list[int], sig: int) -> None:
    """Send `sig` to each pid that still exists."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    """Wait (psutil.wait_procs, which reaps our own children) until none of `pids` runs;
    the ones still running after.

    A zombie counts as gone: it runs no code and holds no memory or file. One whose
    parent is another process is not ours to reap, and wait_procs would wait out
    the timeout for it, so it is not waited for.
    """
    waiting = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            process = psutil.Process(pid)
            if _alive(process) or process.ppid() == os.getpid():
                waiting.append(process)
    _, alive = psutil.wait_procs(waiting, timeout=timeout_s)
    return sorted(process.pid for process in alive if _alive(process))


def stop_tree(
    root: int,
    timeout_s: float,
    *,
    include_adopted: bool = False,
    spare: set[int] | frozenset[int] = frozenset(),
) -> list[int]:
    """SIGTERM `root`, then SIGKILL whatever of its tree is left after `timeout_s`.

    The tree is snapshotted before the signal, so processes re-parented when their
    parent dies stay tracked. `include_adopted`: also stop every descendant of this
    process (right for a supervisor whose only child is `root`, as a subreaper),
    except the pids in `spare` (its watchdog). Returns the pids still running after
    SIGKILL (empty when the tree is gone).
    """
    tree = {root, *descendants(root)}
    signal_all([root], signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while True:
        tree |= set(descendants(root))  # children started during shutdown count too
        if include_adopted:
            tree |= set(descendants(os.getpid())) - set(spare)
        alive = wait_gone(sorted(tree), 0.0)
        if not alive or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    if alive:
        signal_all(alive, signal.SIGKILL)
        alive = wait_gone(alive, 5.0)
    return alive


def command_line(pid: int) -> str:
    """A process's command line (as set by setproctitle too), or "" when it is gone."""
    try:
        return " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return ""


def parent(pid: int) -> int | None:
    """The parent pid of `pid`, or None when it is gone."""
    try:
        return psutil.Process(pid).ppid()
    except psutil.Error:
        return None


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of `pid` (all its threads); 0 when it is gone."""
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return times.user + times.system


def rss_bytes(pid: int) -> int:
    """Resident memory of `pid` now; 0 when it is gone."""
    try:
        return psutil.Process(pid).memory_info().rss
    except psutil.Error:
        return 0


def tree_rss_bytes(root: int) -> int:
    """Summed RSS of `root` and its descendants (shared pages count once per process)."""
    return sum(rss_bytes(pid) for pid in [root, *descendants(root)])


def pin_threads(pid: int, cpus: tuple[int, ...]) -> bool:
    """Set the affinity of every thread of `pid` (taskset -a -p); False if it could not."""
    try:
        tids = [thread.id for thread in psutil.Process(pid).threads()]
    except psutil.Error:
        return False
    done = False
    for tid in tids:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(tid, cpus)
            done = True
    return done
