"""An interrupt during a run is raised, and raised again if a library swallowed it."""

from __future__ import annotations

import os
import signal

import pytest

from omni_cpu.launch.pipeline import _Interrupts


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_swallowed_interrupt_is_raised_again_at_the_next_check(signum: int) -> None:
    before = signal.getsignal(signum)
    interrupts = _Interrupts()
    interrupts.install()
    try:
        interrupts.check()  # nothing yet
        try:
            os.kill(os.getpid(), signum)
            signal.pthread_sigmask(signal.SIG_BLOCK, [])  # a bytecode boundary for delivery
        except KeyboardInterrupt:
            pass  # what a library that drops it would do
        with pytest.raises(KeyboardInterrupt):
            interrupts.check()
    finally:
        interrupts.restore()
    assert signal.getsignal(signum) == before
