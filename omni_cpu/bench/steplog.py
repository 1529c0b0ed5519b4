"""Read the stage workers' per-step log (OMNI_CPU_STEP_LOG) for one benchmark window.

The talker's decode step time and the code2wav stage's busy time come from inside
the workers (omni_cpu.platform.step_log), not from /proc CPU time, which counts
idle OpenMP threads spinning as work.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class StepWindow:
    """Work steps (tokens > 0) each stage ran between two wall-clock times."""

    talker: tuple[dict[str, Any], ...]
    code2wav: tuple[dict[str, Any], ...]

    def talker_step_ms_p50(self) -> float | None:
        """Median talker decode step (one frame per running stream), code predictor included."""
        decode = [r["step_ms"] for r in self.talker if r.get("code_predictor_ms", 0) > 0]
        return round(statistics.median(decode), 1) if decode else None

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
