"""Requests per task type: what vLLM-Omni receives, and every mismatch as one line."""

from __future__ import annotations

import numpy as np
import pytest

from omni_cpu.checkpoint.writer import make_checkpoint
from omni_cpu.errors import InputError
from omni_cpu.speech.ref_audio import from_samples
from omni_cpu.speech.request import build_requests, read_model_info
from tests.helpers.cli import exit_code

KINDS = ("custom-voice", "voice-design", "base")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """One real tiny checkpoint of each kind (their config.json is what is read)."""
    root = tmp_path_factory.mktemp("kinds")
    return {
        kind: read_model_info(str(make_checkpoint("tiny", root / kind, kind=kind)))
        for kind in KINDS
    }


@pytest.fixture(scope="module")
def voice():
    t = np.arange(48000) / 24000
    return from_samples("voice.wav", 0.3 * np.sin(2 * np.pi * 200 * t), 24000)


def test_each_kind_reads_as_its_task_type(models):
    assert {kind: info.task_type for kind, info in models.items()} == {
        "custom-voice": "CustomVoice",
        "voice-design": "VoiceDesign",
        "base": "Base",
    }


def test_voice_design_sends_the_instruction_in_non_streaming_prompt_mode(models):
    (request,) = build_requests(models["voice-design"], ["Hi"], None, instruct="A deep voice.")
    info = request.additional_information()
    assert info["task_type"] == ["VoiceDesign"] and info["instruct"] == ["A deep voice."]
    assert info["non_streaming_mode"] == [True] and "speaker" not in info


def test_base_sends_the_reference_as_24k_samples_with_its_transcript(models, voice):
    (request,) = build_requests(
        models["base"], ["Hi"], None, ref_audio=voice, ref_text="Hello there."
    )
    info = request.additional_information()
    assert info["task_type"] == ["Base"] and info["x_vector_only_mode"] == [False]
    samples, rate = info["ref_audio"][0]
    assert rate == 24000 and len(samples) == 48000
    assert info["ref_text"] == ["Hello there."] and info["ref_code_length"] == [25]


def test_base_x_vector_only_needs_no_transcript(models, voice):
    (request,) = build_requests(models["base"], ["Hi"], None, ref_audio=voice, x_vector_only=True)
    info = request.additional_information()
    assert info["x_vector_only_mode"] == [True] and "ref_text" not in info


@pytest.mark.parametrize(
    ("kind", "kwargs", "words"),
    [
        ("custom-voice", {"ref_audio": "voice"}, "--ref-audio is for Base"),
        ("custom-voice", {"ref_text": "Hi."}, "--ref-text is for Base"),
        ("voice-design", {"ref_audio": "voice", "instruct": "x"}, "--ref-audio is for Base"),
        ("base", {"speaker": "ryan", "ref_audio": "voice"}, "--speaker is for CustomVoice"),
        ("base", {"ref_audio": "voice"}, "--ref-text is needed"),
        ("base", {}, "needs --ref-audio"),
        ("base", {"ref_audio": "voice", "ref_text": "a", "instruct": "x"}, "not supported by Base"),
        ("voice-design", {}, "needs --instruct"),
        ("voice-design", {"speaker": "ryan", "instruct": "x"}, "--speaker is for CustomVoice"),
        ("custom-voice", {"query_type": "Base"}, "does not fit this model"),
        ("custom-voice", {"query_type": "Cloning"}, "unknown --query-type"),
    ],
)
def test_a_mismatch_is_one_line(models, voice, kind, kwargs, words):
    kwargs = {k: (voice if v == "voice" else v) for k, v in kwargs.items()}
    speaker = kwargs.pop("speaker", None)
    with pytest.raises(InputError, match=words) as refused:
        build_requests(models[kind], ["Hi"], speaker, **kwargs)
    assert "\n" not in refused.value.one_line()
    assert refused.value.fix


def test_a_query_type_mismatch_names_the_checkpoint_kind_to_make(models):
    with pytest.raises(InputError) as refused:
        build_requests(models["custom-voice"], ["Hi"], None, query_type="VoiceDesign")
    assert "make-checkpoint --kind voice-design" in refused.value.fix


def test_bench_on_a_base_model_needs_reference_audio_before_any_engine(models, monkeypatch, capsys):
    code = exit_code(monkeypatch, "bench", "--model", str(models["base"].path), "--frames", "4")
    err = capsys.readouterr().err
    assert code == 2 and "needs --ref-audio" in err and len(err.strip().splitlines()) == 1


def test_bench_query_type_must_fit_the_model(models, monkeypatch, capsys):
    model = str(models["voice-design"].path)
    code = exit_code(monkeypatch, "bench", "--model", model, "--query-type", "Base")
    assert code == 2 and "does not fit this model" in capsys.readouterr().err
