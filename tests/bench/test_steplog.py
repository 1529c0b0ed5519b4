"""The bench's reading of the workers' step log for one level's time window."""

from __future__ import annotations

import json
from pathlib import Path

from omni_cpu.bench import steplog


def write(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"t": 5, "step_')


def test_window_keeps_work_steps_between_its_times(tmp_path: Path) -> None:
    write(
        tmp_path / "talker-11.jsonl",
        [
            {"t": 1.0, "step_ms": 900.0, "code_predictor_ms": 0.0, "tokens": 28},  # before
            {"t": 2.0, "step_ms": 5000.0, "code_predictor_ms": 0.0, "tokens": 28},  # prefill
            {"t": 3.0, "step_ms": 300.0, "code_predictor_ms": 200.0, "tokens": 1},
            {"t": 4.0, "step_ms": 320.0, "code_predictor_ms": 210.0, "tokens": 1},
            {"t": 4.5, "step_ms": 340.0, "code_predictor_ms": 230.0, "tokens": 1},
            {"t": 9.0, "step_ms": 999.0, "code_predictor_ms": 999.0, "tokens": 1},  # after
        ],
    )
    write(
        tmp_path / "code2wav-12.jsonl",
        [
            {"t": 2.5, "step_ms": 0.1, "code_predictor_ms": 0.0, "tokens": 0},  # idle poll
            {"t": 3.5, "step_ms": 600.0, "code_predictor_ms": 0.0, "tokens": 16},
            {"t": 4.2, "step_ms": 3300.0, "code_predictor_ms": 0.0, "tokens": 400},
        ],
    )
    window = steplog.read_window(tmp_path, 1.5, 5.0)
    assert window.talker_step_ms_p50() == 320.0
    assert window.code_predictor_ms_p50() == 210.0
    assert window.code2wav_busy_ms() == 3900.0


def test_an_empty_window_reports_nothing(tmp_path: Path) -> None:
    window = steplog.read_window(tmp_path, 0.0, 1.0)
    assert window.talker_step_ms_p50() is None
    assert window.code_predictor_ms_p50() is None
    assert window.code2wav_busy_ms() is None
