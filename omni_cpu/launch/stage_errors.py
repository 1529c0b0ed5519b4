"""A stage failure as one line: what failed, which stage process died, memory or not."""

from __future__ import annotations

import re

from omni_cpu.errors import StageError
from omni_cpu.process.watch import StageWatch

MEMORY_WORDS = re.compile(r"out of memory|memoryerror|cannot allocate memory|\boom\b", re.I)


def stage_error(phase: str, error: BaseException, watch: StageWatch | None) -> StageError:
    """One line: what failed, which stage process died, and a memory hint only for memory."""
    reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
    deaths = watch.deaths() if watch is not None else None
    message = f"{phase} failed: {reason}"
    if deaths:
        message = f"{phase} failed: {deaths}"
        message += f" ({reason})" if reason else ""
    memory = isinstance(error, MemoryError) or MEMORY_WORDS.search(reason) is not None
    oom = watch.oom_note() if watch is not None else ""
    if oom:
        memory = True
        message += oom
    if memory:
        fix = (
            "memory: lower kv_cache_memory_bytes in the profile or free memory "
            "(--debug shows the driver traceback)"
        )
    else:
        fix = "the stage's own error is in the log above (--debug shows the driver traceback)"
    return StageError(message, fix)
