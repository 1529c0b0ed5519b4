"""An interrupt during a run is raised, and raised again if a library swallowed it."""

from __future__ import annotations

import os
import signal

import pytest

from omni_cpu.launch.interrupts import Interrupts


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_swallowed_interrupt_is_raised_again_at_the_next_check(signum: int) -> None:
    before = signal.getsignal(signum)
    interrupts = Interrupts()
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


def test_a_stage_error_names_the_dead_process_and_hints_memory_only_for_memory() -> None:
    from omni_cpu.launch.stage_errors import stage_error
    from omni_cpu.process.stage_processes import StageProcess
    from omni_cpu.process.watch import StageWatch

    watch = StageWatch(os.getpid(), {}, stall_s=0)
    watch.seen = {2**22 + 7: StageProcess(2**22 + 7, "worker", 0, "talker")}  # no such pid
    error = stage_error("synthesis", RuntimeError("Stage-0 replica-0 is dead"), watch)
    assert "stage 0 (talker) worker pid 4194311 died" in str(error)
    assert "kv_cache_memory_bytes" not in error.one_line()
    memory = stage_error("synthesis", RuntimeError("CPU out of memory"), watch)
    assert "kv_cache_memory_bytes" in memory.one_line()


def test_a_thread_failing_while_the_stages_stop_prints_nothing(
    capfd: pytest.CaptureFixture[str],
) -> None:
    import threading

    from omni_cpu.launch import interrupts

    def fail() -> None:
        raise RuntimeError("Stage-0 is dead")  # what vLLM-Omni's orchestrator thread raises

    shown: list[str] = []  # what the previous hook (Python's: a traceback) was given
    previous = threading.excepthook
    threading.excepthook = interrupts.quiet_thread_errors(lambda a: shown.append(str(a.exc_value)))
    try:
        interrupts.STOPPING.set()  # an interrupt arrived: the stages are being stopped
        thread = threading.Thread(target=fail, name="orchestrator")
        thread.start()
        thread.join(5)
        assert shown == [] and capfd.readouterr().err == ""
        interrupts.STOPPING.clear()  # not stopping: a thread's failure is still shown
        thread = threading.Thread(target=fail, name="orchestrator")
        thread.start()
        thread.join(5)
        assert shown == ["Stage-0 is dead"]
    finally:
        threading.excepthook = previous
        interrupts.STOPPING.clear()
