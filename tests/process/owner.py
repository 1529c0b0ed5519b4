"""A stand-in for `omni-cpu run`: a guarded owner whose child holds shared memory.

The child ignores SIGTERM, as vLLM's engine core and Python's resource tracker do.
Prints the child's pid and the /dev/shm name it holds, then waits (or with `exit`,
ends cleanly). With `titled`, the child is a stage as vLLM starts one: it sets its
title (setproctitle) and holds a semaphore that no resource tracker will unlink
once it is killed, as a stage killed under `serve` loses one. A `fork-` prefix
starts the owner as `omni-cpu` starts a driver that forks its stages
(omni_cpu.launch.relaunch): re-executed once with its own driver mark, then the
child forked, so the child's /proc environ carries the mark and not the token.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import time
from multiprocessing import shared_memory
from pathlib import Path

from omni_cpu import envs
from omni_cpu.process.guard import StageGuard, driver_mark, new_driver_mark


def child(ready: multiprocessing.synchronize.Event, names: multiprocessing.Queue) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    segment = shared_memory.SharedMemory(create=True, size=1 << 20)
    segment.buf[:4] = b"omni"
    names.put(segment.name)
    ready.set()
    time.sleep(600)


def titled_child(ready: multiprocessing.synchronize.Event, names: multiprocessing.Queue) -> None:
    import _multiprocessing

    import setproctitle

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    setproctitle.setproctitle("VLLM::StageEngineCoreProc_stage0_replica0_DP0")
    name = f"mp-omni-cpu-test-{os.getpid()}"
    # kind 1 (a semaphore), value 1, at most 1; not unlinked at once nor registered with
    # a resource tracker: what multiprocessing's spawn context creates, minus its cleaner.
    semaphore = _multiprocessing.SemLock(1, 1, 1, "/" + name, False)
    names.put(f"sem.{name}")
    ready.set()
    time.sleep(600)
    del semaphore


def main(mode: str, folder: str) -> None:
    start = "spawn"
    if mode.startswith("fork-"):
        start, mode = "fork", mode.removeprefix("fork-")
        if not driver_mark(os.getpid(), dict(os.environ)):
            env = {**os.environ, envs.DRIVER.name: new_driver_mark(os.getpid(), time.time())}
            os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
    context = multiprocessing.get_context(start)
    with StageGuard([Path(folder)]):
        ready, names = context.Event(), context.Queue()
        target = titled_child if mode == "titled" else child
        process = context.Process(target=target, args=(ready, names))
        process.start()
        ready.wait(60)
        print(process.pid, names.get(timeout=60), flush=True)
        if mode == "exit":
            time.sleep(3)  # the watchdog records what the child holds (it polls each second)
            process.kill()
            process.join()
            return
        time.sleep(600)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
