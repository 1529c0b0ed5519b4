"""Stage start-up phases: written by a stage worker, read back by the driver for --json."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from omni_cpu import envs
from omni_cpu.launch.results import STARTUP_PHASES, startup_dict
from omni_cpu.platform import stage_startup

TALKER = {"load_model_s": 1.5, "pack_s": 0.01, "weight_cache": "hit", "weights": "int8"}


def test_a_stage_that_starts_inside_collected_reports_its_phases(monkeypatch) -> None:
    monkeypatch.delenv(envs.STARTUP_DIR.name, raising=False)
    with stage_startup.collected() as stages:
        folder = Path(os.environ[envs.STARTUP_DIR.name])
        assert stage_startup.write("talker", TALKER) is not None
        stage_startup.write("code2wav", {"load_model_s": 0.4})
    assert stages == {"talker": TALKER, "code2wav": {"load_model_s": 0.4}}
    assert envs.STARTUP_DIR.name not in os.environ  # set for the engines' start alone
    assert not folder.exists()


def test_a_worker_asked_for_nothing_writes_nothing(monkeypatch) -> None:
    monkeypatch.delenv(envs.STARTUP_DIR.name, raising=False)
    assert stage_startup.write("talker", TALKER) is None


def test_half_written_and_foreign_files_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "talker-1.json").write_text('{"kind": "talker", "pack_s"')
    (tmp_path / "notes.json").write_text("[1, 2]")
    (tmp_path / "code2wav-2.json").write_text('{"kind": "code2wav", "load_model_s": 1.0}')
    assert stage_startup.read(tmp_path) == {"code2wav": {"load_model_s": 1.0}}


def test_stage_phases_sit_beside_the_driver_total_not_in_it() -> None:
    driver = {"runtime_import_s": 6.0, "engines_s": 19.0, "prompt_tokenizer_s": 0.25}
    shown = startup_dict(driver, {"talker": TALKER})
    assert shown["total_s"] == pytest.approx(25.25)
    assert set(shown["phases"]) == set(driver) <= set(STARTUP_PHASES)  # each one described
    assert shown["stages"]["talker"]["weight_cache"] == "hit"
    assert set(shown["stage_phases"]) == set(TALKER)  # each reported phase says what it is
    assert "stages" not in startup_dict(driver)
