"""A stand-in for `omni-cpu run`: a guarded owner whose child holds shared memory.

The child ignores SIGTERM, as vLLM's engine core and Python's resource tracker do.
Prints the child's pid and segment name, then waits (or with `exit`, ends cleanly).
Modes `fork-wait` and `fork-exit` start the owner as `omni-cpu` starts a driver
that forks its stages (omni_cpu.launch.relaunch): re-executed once with its own
driver mark, then the child forked, so the child's /proc environ carries the mark
and not the token.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import time
from multiprocessing import shared_memory
from pathlib import Path

from omni_cpu.process.guard import DRIVER_MARK_ENV, StageGuard, driver_mark, new_driver_mark


def child(ready: multiprocessing.synchronize.Event, names: multiprocessing.Queue) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    segment = shared_memory.SharedMemory(create=True, size=1 << 20)
    segment.buf[:4] = b"omni"
    names.put(segment.name)
    ready.set()
    time.sleep(600)


def main(mode: str, folder: str) -> None:
    start = "fork" if mode.startswith("fork-") else "spawn"
    if start == "fork" and not driver_mark(os.getpid(), dict(os.environ)):
        env = {**os.environ, DRIVER_MARK_ENV: new_driver_mark(os.getpid(), time.time())}
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
    context = multiprocessing.get_context(start)
    with StageGuard([Path(folder)]):
        ready, names = context.Event(), context.Queue()
        process = context.Process(target=child, args=(ready, names))
        process.start()
        ready.wait(60)
        print(process.pid, names.get(timeout=60), flush=True)
        if mode.endswith("exit"):
            time.sleep(3)  # the watchdog records what the child holds (it polls each second)
            process.kill()
            process.join()
            return
        time.sleep(600)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
