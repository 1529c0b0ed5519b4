"""Per-step timings from inside the stage workers: written by them, read by `bench`.

With `OMNI_CPU_STEP_LOG=DIR` set, every stage worker appends one JSON line per
engine step to `DIR/<stage kind>-<pid>.jsonl`: wall milliseconds spent in the
runner's `execute_model` + `sample_tokens` and, for the talker, in the code
predictor. This is the only honest way to see code2wav's own cost: its idle
OpenMP threads spin, so CPU time from /proc overstates it. Off by default; the
cost when on is two `perf_counter` calls and one short write per step.
`read_window` reads the lines back for one benchmark window (bench's step times).
Import-light (no torch): bench imports it in the driver.
"""

from __future__ import annotations

import functools
import json
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omni_cpu import envs

# The step-log folders bench makes in the temp directory (and removes; `doctor` lists any
# a killed bench left).
STEP_DIR_PREFIX = "omni-cpu-steps-"


class StepLog:
    """Accumulates one step's timings and writes them as a JSON line."""

    def __init__(self, directory: Path, kind: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._file = open(directory / f"{kind}-{os.getpid()}.jsonl", "a", buffering=1)  # noqa: SIM115
        self._step_ms = 0.0
        self._predictor_ms = 0.0
        self._tokens = 0

    def add_step(self, ms: float, tokens: int) -> None:
        self._step_ms += ms
        self._tokens = max(self._tokens, tokens)

    def add_predictor(self, ms: float) -> None:
        self._predictor_ms += ms

    def flush(self) -> None:
        """Write the step that just ended (called after `sample_tokens`)."""
        if self._step_ms == 0.0:
            return
        record = {
            "t": round(time.time(), 4),
            "step_ms": round(self._step_ms, 3),
            "code_predictor_ms": round(self._predictor_ms, 3),
            "tokens": self._tokens,
        }
        self._file.write(json.dumps(record) + "\n")
        self._step_ms = self._predictor_ms = 0.0
        self._tokens = 0


def step_log_from_env(kind: str) -> StepLog | None:
    """A log for this worker when `OMNI_CPU_STEP_LOG` names a directory."""
    directory = envs.OMNI_CPU_STEP_LOG
    return StepLog(Path(directory), kind) if directory else None


def timed(method: Callable[..., Any], record: Callable[[float], None]) -> Callable[..., Any]:
    """`method` wrapped so each call's wall milliseconds go to `record`."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            record((time.perf_counter() - start) * 1000.0)

    return wrapper


def scheduled_tokens(scheduler_output: Any) -> int:
    """Tokens the scheduler handed this step (0 when the object lacks the field)."""
    return int(getattr(scheduler_output, "total_num_scheduled_tokens", 0) or 0)


PROFILE_FIRST_STEP = 10  # after prefill and the first decode steps' one-time costs
PROFILE_STEPS = 10


class StepProfiler:
    """torch.profiler over steps 10..19 of one worker, written as an op table.

    With `OMNI_CPU_TORCH_PROFILE=DIR`, the worker writes
    `DIR/<stage kind>-<pid>-profile.txt` (ops by self CPU time) once those steps
    have run. For finding where a step's time goes; off by default.
    """

    def __init__(self, directory: Path, kind: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._path = directory / f"{kind}-{os.getpid()}-profile.txt"
        self._steps = 0
        self._profiler: Any = None

    def step(self) -> None:
        """Call once per engine step, before it runs."""
        self._steps += 1
        if self._steps == PROFILE_FIRST_STEP:
            from torch.profiler import profile

            self._profiler = profile()
            self._profiler.__enter__()
        elif self._steps == PROFILE_FIRST_STEP + PROFILE_STEPS and self._profiler is not None:
            self._profiler.__exit__(None, None, None)
            table = self._profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=40)
            self._path.write_text(f"steps {PROFILE_FIRST_STEP}..{self._steps - 1}\n{table}\n")
            self._profiler = None


def step_profiler_from_env(kind: str) -> StepProfiler | None:
    """A profiler for this worker when `OMNI_CPU_TORCH_PROFILE` names a directory."""
    directory = envs.OMNI_CPU_TORCH_PROFILE
    return StepProfiler(Path(directory), kind) if directory else None


@dataclass(frozen=True)
class StepWindow:
    """Work steps (tokens > 0) each stage ran between two wall-clock times."""

    talker: tuple[dict[str, Any], ...]
    code2wav: tuple[dict[str, Any], ...]

    def talker_decode_ms(self) -> list[float]:
        """Each talker decode step's ms (one frame per running stream), code predictor included."""
        return [r["step_ms"] for r in self.talker if r.get("code_predictor_ms", 0) > 0]

    def talker_step_ms_p50(self) -> float | None:
        """Median talker decode step."""
        decode = self.talker_decode_ms()
        return round(statistics.median(decode), 1) if decode else None

    def talker_step_ms_p95(self) -> float | None:
        """95th percentile talker decode step, linear between ranks (as bench's percentiles):
        over the median, the step's spread (omni_cpu.plan.costs.TALKER_STEP_SPREAD)."""
        decode = self.talker_decode_ms()
        if len(decode) < 2:
            return round(decode[0], 1) if decode else None
        return round(statistics.quantiles(decode, n=20, method="inclusive")[18], 1)

    def code_predictor_ms_p50(self) -> float | None:
        times = [r["code_predictor_ms"] for r in self.talker if r.get("code_predictor_ms", 0) > 0]
        return round(statistics.median(times), 1) if times else None

    def code2wav_busy_ms(self) -> float | None:
        """Wall milliseconds code2wav spent decoding (its steps with codes to decode)."""
        return round(sum(r["step_ms"] for r in self.code2wav), 1) if self.code2wav else None


def read_window(directory: Path, start: float, end: float) -> StepWindow:
    """The work steps logged in `directory` with `start <= t <= end` (time.time())."""

    def records(kind: str) -> tuple[dict[str, Any], ...]:
        found = []
        for path in sorted(directory.glob(f"{kind}-*.jsonl")):
            for line in path.read_text().splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line being written as we read
                if start <= record.get("t", 0) <= end and record.get("tokens", 0) > 0:
                    found.append(record)
        return tuple(found)

    return StepWindow(records("talker"), records("code2wav"))
