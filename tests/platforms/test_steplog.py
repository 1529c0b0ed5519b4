"""Per-step timing lines: written by the stage runners (OMNI_CPU_STEP_LOG), read by bench."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from omni_cpu import envs
from omni_cpu.platform import steplog


def test_no_log_unless_the_environment_names_a_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(envs.STEP_LOG.name, raising=False)
    assert steplog.step_log_from_env("talker") is None


def test_one_json_line_per_step_with_the_predictor_share(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(envs.STEP_LOG.name, str(tmp_path / "steps"))
    log = steplog.step_log_from_env("talker")
    assert log is not None
    log.add_step(12.5, tokens=28)
    log.add_predictor(7.25)
    log.add_step(1.5, tokens=0)  # sample_tokens of the same step
    log.flush()
    log.flush()  # nothing new: no empty line
    log.add_step(3.0, tokens=1)
    log.flush()
    (path,) = (tmp_path / "steps").glob("talker-*.jsonl")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(x["step_ms"], x["code_predictor_ms"], x["tokens"]) for x in lines] == [
        (14.0, 7.25, 28),
        (3.0, 0.0, 1),
    ]


def test_timed_reports_each_call_even_when_it_raises() -> None:
    seen: list[float] = []

    def boom() -> None:
        raise RuntimeError("stage failed")

    with pytest.raises(RuntimeError):
        steplog.timed(boom, seen.append)()
    assert steplog.timed(lambda: 5, seen.append)() == 5
    assert len(seen) == 2 and all(ms >= 0 for ms in seen)


def test_scheduled_tokens_tolerates_outputs_without_the_field() -> None:
    assert steplog.scheduled_tokens(types.SimpleNamespace(total_num_scheduled_tokens=7)) == 7
    assert steplog.scheduled_tokens(object()) == 0


def test_profiler_writes_an_op_table_after_its_window(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setenv(envs.TORCH_PROFILE.name, str(tmp_path))
    profiler = steplog.step_profiler_from_env("talker")
    assert profiler is not None
    x = torch.ones(64, 64)
    last = steplog.PROFILE_FIRST_STEP + steplog.PROFILE_STEPS
    for step in range(1, last + 1):
        profiler.step()
        written = list(tmp_path.glob("talker-*-profile.txt"))
        assert bool(written) == (step == last)
        x = x @ x / 64
    assert "aten::mm" in written[0].read_text()


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
    assert window.talker_step_ms_p95() == 338.0  # rank 1.9 of 300, 320, 340
    assert window.code_predictor_ms_p50() == 210.0
    assert window.code2wav_busy_ms() == 3900.0


def test_an_empty_window_reports_nothing(tmp_path: Path) -> None:
    window = steplog.read_window(tmp_path, 0.0, 1.0)
    assert window.talker_step_ms_p50() is None
    assert window.talker_step_ms_p95() is None
    assert window.code_predictor_ms_p50() is None
    assert window.code2wav_busy_ms() is None
