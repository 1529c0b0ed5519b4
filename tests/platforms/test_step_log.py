"""Per-step timing lines written by the stage runners when OMNI_CPU_STEP_LOG is set."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from omni_cpu.platform import step_log


def test_no_log_unless_the_environment_names_a_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(step_log.STEP_LOG_ENV, raising=False)
    assert step_log.step_log_from_env("talker") is None


def test_one_json_line_per_step_with_the_predictor_share(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(step_log.STEP_LOG_ENV, str(tmp_path / "steps"))
    log = step_log.step_log_from_env("talker")
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
        step_log.timed(boom, seen.append)()
    assert step_log.timed(lambda: 5, seen.append)() == 5
    assert len(seen) == 2 and all(ms >= 0 for ms in seen)


def test_scheduled_tokens_tolerates_outputs_without_the_field() -> None:
    assert step_log.scheduled_tokens(types.SimpleNamespace(total_num_scheduled_tokens=7)) == 7
    assert step_log.scheduled_tokens(object()) == 0


def test_profiler_writes_an_op_table_after_its_window(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setenv(step_log.PROFILE_ENV, str(tmp_path))
    profiler = step_log.step_profiler_from_env("talker")
    assert profiler is not None
    x = torch.ones(64, 64)
    last = step_log.PROFILE_FIRST_STEP + step_log.PROFILE_STEPS
    for step in range(1, last + 1):
        profiler.step()
        written = list(tmp_path.glob("talker-*-profile.txt"))
        assert bool(written) == (step == last)
        x = x @ x / 64
    assert "aten::mm" in written[0].read_text()
