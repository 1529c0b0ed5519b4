"""Interrupts during a run, and the process-wide state they read.

A Ctrl-C or `kill` is raised at once and remembered (`Interrupts`); a stage that stops
making progress interrupts the generating main thread (`StallAlarm`); once the stages
are being stopped, threads that fail with them stay quiet (`quiet_thread_errors`).
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from typing import Any

from omni_cpu.process.watch import StageWatch

# Set once engines were started in this process; the CLI then ends with os._exit.
ENGINES_STARTED = threading.Event()
# Set once this process stops its stages (an interrupt, an error, the end): vLLM-Omni's
# threads then fail as their stages go, and their tracebacks would bury the one line.
STOPPING = threading.Event()
THREAD_ERROR_GRACE_S = 0.5  # a Ctrl-C reaches the stages and the main thread together


def quiet_thread_errors(previous: Callable[[Any], None]) -> Callable[[Any], None]:
    """A threading.excepthook that drops thread errors once the stages are being stopped."""

    def hook(args: Any) -> None:
        if not STOPPING.is_set():
            STOPPING.wait(THREAD_ERROR_GRACE_S)
        if STOPPING.is_set():
            logging.getLogger("omni_cpu").debug(
                "thread %s failed while the stages stopped",
                getattr(args.thread, "name", "?"),
                exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
            )
            return
        previous(args)

    hook.omni_cpu_quiet = True  # type: ignore[attr-defined]
    return hook


class StallAlarm:
    """`run`'s eye on its stages while they start and generate.

    A thread samples the stage watch (`omni_cpu.process.watch.StageWatch`) twice a
    second; once work stops moving it remembers the stall and interrupts the main
    thread where it waits in `generate`, which raises the stall as a StageError.
    """

    def __init__(self, watch: StageWatch) -> None:
        self.watch = watch
        self.stalled: str | None = None  # set once work stopped moving
        self._working: int | None = None  # the thread generating, while it does
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="omni-cpu-stages")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self.watch.sample()
            self.look()

    def working(self, on: bool) -> None:
        """Work is held from `working(True)` in the generating thread to `working(False)`."""
        self._working = threading.get_ident() if on else None

    def look(self) -> None:
        """Note progress; on a stall, remember it and interrupt the generating main thread."""
        working = self._working
        stalled = self.watch.stalled(busy=working is not None)
        if stalled is None or self.stalled is not None:
            return
        self.stalled = stalled
        if working is not None and working == threading.main_thread().ident:
            # Wakes the main thread from whatever it waits in; generate() turns the
            # KeyboardInterrupt into the stall's StageError.
            signal.pthread_kill(working, signal.SIGINT)


class Interrupts:
    """Ctrl-C and `kill` during a run: raised at once, and remembered.

    The engines start inside vLLM-Omni's code; an interrupt that lands there can
    be caught and dropped on the way (seen once in CI: a SIGINT during start-up
    and the run went on to write its WAV). The flag lets `check` raise it again
    at the next point that is ours, so the run still stops and writes nothing.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def _handler(self, signum: int, frame: Any) -> None:
        self.signum = signum
        STOPPING.set()
        raise KeyboardInterrupt

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # only the main thread may set handlers (tests call run in threads)
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, self._handler)

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def check(self) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt
