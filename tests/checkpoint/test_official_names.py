"""Every kind and size of checkpoint holds exactly the tensors the official classes have.

tests/checkpoint/official-names.json is made by scripts/official_checkpoint_names.py,
which runs in the qwen-tts reference venv (benchmarks/setup-qwen-tts-venv.sh):
it instantiates the PyPI `qwen-tts` 0.1.1 classes `Qwen3TTSForConditionalGeneration`
and `Qwen3TTSTokenizerV2Model` from omni-cpu's config values on the meta device and
records their state dicts (names, shapes, dtypes, in order), i.e. the keys the
official `from_pretrained` loads. Rerun the script after changing a config.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from omni_cpu.checkpoint import configs
from omni_cpu.checkpoint.layout import model_layout, speech_tokenizer_layout

OFFICIAL = json.loads(Path(__file__).with_name("official-names.json").read_text())
KIND_SIZES = [
    (kind, size)
    for kind in configs.KINDS
    for size in configs.SIZES
    if size == "tiny" or (kind, size) in configs.PUBLISHED
]


def _rows(layout: dict) -> list[list]:
    return [[name, list(spec.shape), spec.dtype] for name, spec in layout.items()]


def test_the_names_file_covers_every_kind_and_size():
    assert set(OFFICIAL["model"]) == {f"{kind}/{size}" for kind, size in KIND_SIZES}
    assert set(OFFICIAL["speech_tokenizer"]) == set(configs.SIZES)


@pytest.mark.parametrize(("kind", "size"), KIND_SIZES)
def test_model_file_equals_the_official_state_dict(kind, size):
    layout = model_layout(configs.model_config(size, kind))
    assert _rows(layout) == OFFICIAL["model"][f"{kind}/{size}"]


@pytest.mark.parametrize("size", configs.SIZES)
def test_speech_tokenizer_file_equals_the_official_state_dict(size):
    layout = speech_tokenizer_layout(configs.speech_tokenizer_config(size))
    assert _rows(layout) == OFFICIAL["speech_tokenizer"][size]


@pytest.mark.parametrize("size", ["tiny", "0.6b", "1.7b"])
def test_only_base_carries_the_speaker_encoder(size):
    for kind in configs.KINDS:
        key = f"{kind}/{size}"
        if key not in OFFICIAL["model"]:
            continue
        has = any(name.startswith("speaker_encoder.") for name, _, _ in OFFICIAL["model"][key])
        assert has == (kind == "base"), key


def test_base_speaker_encoder_outputs_the_talker_width():
    for size in ("0.6b", "1.7b"):
        config = configs.model_config(size, "base")
        fc = model_layout(config)["speaker_encoder.fc.weight"]
        assert fc.shape[0] == config["talker_config"]["hidden_size"]


def test_voice_design_and_base_have_no_preset_speakers_or_dialects():
    for kind in ("voice-design", "base"):
        talker = configs.model_config("1.7b", kind)["talker_config"]
        assert talker["spk_id"] == {} and talker["spk_is_dialect"] == {}
        assert not any("dialect" in name for name in talker["codec_language_id"])


def test_a_kind_qwen_does_not_publish_is_refused():
    with pytest.raises(ValueError, match=r"not published at 0\.6b"):
        configs.model_config("0.6b", "voice-design")
