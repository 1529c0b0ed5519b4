"""bench's stage times from the step log the stage workers write (OMNI_CPU_STEP_LOG)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from omni_cpu.bench.sweep import Level
from omni_cpu.platform import steplog

# One stream's decode steps as a noisy host gives them: mostly 60 ms, a slow tail.
STEPS_MS = [60.0] * 17 + [70.0, 80.0, 90.0]


def write_steps(directory: Path) -> None:
    """The talker's prefill and decode steps and code2wav's chunks, through StepLog itself."""
    talker = steplog.StepLog(directory, "talker")
    talker.add_step(400.0, tokens=28)  # the prompt's prefill: no code predictor in it
    talker.flush()
    for ms in STEPS_MS:
        talker.add_step(ms - 1.0, tokens=1)
        talker.add_predictor(ms / 2)
        talker.add_step(1.0, tokens=0)  # sample_tokens of the same step
        talker.flush()
    code2wav = steplog.StepLog(directory, "code2wav")
    for _ in range(2):
        code2wav.add_step(450.0, tokens=160)
        code2wav.flush()


def level_from(directory: Path, frames: float) -> Level:
    level = Level(1, {}, None, {}, {}, {})
    level.take_step_log(steplog.read_window(directory, 0.0, time.time() + 1), frames)
    return level


def test_a_level_reports_the_talker_steps_median_and_p95_from_the_step_log(
    tmp_path: Path,
) -> None:
    write_steps(tmp_path)
    reported = level_from(tmp_path, frames=20).to_dict()
    assert reported["talker_step_ms"] == 60.0
    # Rank 0.95 x 19 = 18.05 of the sorted steps: 80 ms and a twentieth of the way to 90.
    assert reported["talker_step_ms_p95"] == pytest.approx(80.5)
    assert reported["code_predictor_ms"] == 30.0
    assert reported["code2wav_ms_per_frame"] == 45.0


def test_a_level_without_decode_steps_reports_no_step_times(tmp_path: Path) -> None:
    reported = level_from(tmp_path, frames=20).to_dict()
    assert reported["talker_step_ms"] is None and reported["talker_step_ms_p95"] is None
