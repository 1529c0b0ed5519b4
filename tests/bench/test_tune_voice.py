"""`omni-cpu tune` takes every task type's voice, as `run` and `bench` do; no engine starts.

Tune's options come from the same declarations as run's and bench's
(omni_cpu/cli/voice.py), so a Base model is tuned on a cloned voice and a
VoiceDesign model on a described one. The dry runs here plan the grid on tiny
checkpoints of each kind; the mistakes are one line and exit 2 before planning.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from omni_cpu.cli.tune_cmd import RUN_COLUMNS
from omni_cpu.cli.voice import BENCH_VOICE, Voice, bench_request
from omni_cpu.errors import InputError
from omni_cpu.speech.request import read_model_info
from tests.helpers.hub import cache_model, offline_env

OMNI_CPU = str(Path(sys.executable).with_name("omni-cpu"))
HUB_ID = "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"


def _omni_cpu(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([OMNI_CPU, *args], capture_output=True, text=True, timeout=600, env=env)


@pytest.fixture(scope="module")
def kinds(tiny_kinds: dict[str, Path]) -> dict[str, Path]:
    return tiny_kinds


@pytest.fixture(scope="module")
def offline_with_hub_id(kinds, tmp_path_factory) -> dict[str, str]:
    """An environment whose hub cache holds HUB_ID (a tiny CustomVoice), the hub kept out:
    the model check passes as it does for a downloaded model, and nothing is fetched."""
    cache = tmp_path_factory.mktemp("hub-cache")
    cache_model(cache, HUB_ID, kinds["custom-voice"])
    return offline_env(cache)


def _wav(path: Path, seconds: float, amplitude: float, rate: int = 16000) -> Path:
    import soundfile

    t = np.arange(int(seconds * rate)) / rate
    soundfile.write(str(path), amplitude * np.sin(2 * np.pi * 200 * t), rate, subtype="PCM_16")
    return path


@pytest.fixture(scope="module")
def voice_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 s of a 200 Hz tone at 16 kHz: read, resampled to 24 kHz."""
    return _wav(tmp_path_factory.mktemp("ref") / "voice.wav", 2.0, 0.3)


def _tune_dry_run(
    model: Path | str, *extra: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return _omni_cpu(
        "tune", "--model", str(model), "--dry-run", "--max-points", "2", "--json", *extra, env=env
    )


def test_tune_plans_a_base_model_with_its_reference(kinds, voice_wav):
    done = _tune_dry_run(kinds["base"], "--ref-audio", str(voice_wav), "--ref-text", "A tone.")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["query_type"] == "Base"
    assert result["runs"] and result["runs"][0]["auto"] is True


def test_tune_plans_a_base_model_from_the_speaker_embedding_alone(kinds, voice_wav):
    done = _tune_dry_run(kinds["base"], "--ref-audio", str(voice_wav), "--x-vector-only")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["query_type"] == "Base"


def test_tune_plans_a_voice_design_model_with_an_instruction(kinds):
    done = _tune_dry_run(kinds["voice-design"], "--instruct", "A deep, calm voice.")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["query_type"] == "VoiceDesign"


@pytest.mark.parametrize(
    ("kind", "extra", "words"),
    [
        ("base", (), "--ref-audio"),
        ("base", ("--ref-audio", "VOICE"), "--ref-text"),
        ("base", ("--ref-audio", "SILENT", "--ref-text", "x"), "silent"),
        ("base", ("--ref-audio", "VOICE", "--ref-text", "x", "--speaker", "ryan"), "--speaker"),
        ("voice-design", ("--instruct", "   "), "--instruct"),
        (HUB_ID, ("--ref-audio", "VOICE", "--ref-text", "x"), "Base"),
        (HUB_ID, ("--query-type", "VoiceClone"), "CustomVoice"),
    ],
)
def test_tune_voice_mistakes_are_one_line_and_exit_2(
    kinds, voice_wav, tmp_path, kind, extra, words, offline_with_hub_id
):
    silent = _wav(tmp_path / "silent.wav", 2.0, 0.0)
    paths = {"VOICE": str(voice_wav), "SILENT": str(silent)}
    model = kinds.get(kind, kind)
    env = offline_with_hub_id if kind == HUB_ID else None
    done = _tune_dry_run(model, *(paths.get(arg, arg) for arg in extra), env=env)
    assert done.returncode == 2, done.stdout
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert words in done.stderr


def test_bench_request_fills_the_voice_a_user_left_out(kinds, voice_wav):
    designed = bench_request(read_model_info(str(kinds["voice-design"])), 10)
    assert (designed.task_type, designed.instruct) == ("VoiceDesign", BENCH_VOICE)
    preset = bench_request(read_model_info(HUB_ID), 10)
    assert (preset.task_type, preset.speaker, preset.max_frames) == ("CustomVoice", "ryan", 10)
    cloned = bench_request(
        read_model_info(str(kinds["base"])), 10, Voice(ref_audio=voice_wav, ref_text="A tone.")
    )
    assert cloned.task_type == "Base" and cloned.ref_audio is not None
    assert cloned.ref_audio.original_rate == 16000 and cloned.ref_audio.seconds == 2.0


def test_bench_request_refuses_a_base_model_without_reference(kinds):
    with pytest.raises(InputError, match="--ref-audio"):
        bench_request(read_model_info(str(kinds["base"])), 10)


VOICE_OPTIONS = (
    "--query-type",
    "--speaker",
    "--instruct",
    "--ref-audio",
    "--ref-text",
    "--x-vector-only",
)


def test_run_bench_and_tune_offer_the_same_voice_options():
    import typer.main

    from omni_cpu.cli import app

    group = typer.main.get_command(app)
    offered = {}
    for name in ("run", "bench", "tune"):
        command = group.commands[name]  # type: ignore[attr-defined]
        options = {opt: param for param in command.params for opt in param.opts}
        offered[name] = {opt: (options[opt].help, options[opt].default) for opt in VOICE_OPTIONS}
    assert offered["run"] == offered["bench"] == offered["tune"]


def test_tune_heads_its_table_in_plain_words(kinds):
    done = subprocess.run(
        [OMNI_CPU, "tune", "--model", str(kinds["custom-voice"]), "--dry-run", "--max-points", "1"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stderr
    header = next(line for line in done.stdout.splitlines() if "point" in line)
    for column in RUN_COLUMNS[1:]:
        assert column in header, header
    assert "TTFA" not in done.stdout and "audio-s/wall-s" not in done.stdout
