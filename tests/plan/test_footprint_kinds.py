"""The footprint counts what each stage holds, for every kind and size of model."""

from __future__ import annotations

import pytest

from omni_cpu.checkpoint.writer import make_checkpoint
from omni_cpu.plan.footprint import footprint_for_model


def test_the_talker_stage_counts_the_speaker_and_tokenizer_encoders():
    fp = footprint_for_model("0.6b")
    assert fp.speaker_encoder_params > 1_000_000
    assert fp.tokenizer_encoder_params > 10_000_000
    assert fp.talker_weight_bytes("float32") == (
        4 * (fp.talker_params + fp.speaker_encoder_params) + 2 * fp.tokenizer_encoder_params
    )


def test_code2wav_counts_only_the_tokenizers_decoder():
    fp = footprint_for_model("0.6b")
    assert fp.code2wav_params + fp.tokenizer_encoder_params == 170_557_441


@pytest.mark.parametrize(
    ("spec", "kind"),
    [
        ("Qwen/Qwen3-TTS-12Hz-1.7B-Base", "base"),
        ("Qwen/Qwen3-TTS-12Hz-1.7B-VoiceDesign", "voice-design"),
        ("Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice", "custom-voice"),
        ("qwen3-tts-12hz-0.6b-base", "base"),
        ("1.7b", "custom-voice"),
    ],
)
def test_a_hub_id_or_name_gives_its_kind(spec, kind):
    assert footprint_for_model(spec).kind == kind


def test_the_17b_talker_is_bigger_than_the_06b_and_base_adds_no_talker_weights():
    small, large = footprint_for_model("0.6b"), footprint_for_model("1.7b")
    assert large.talker_params > 1.5 * small.talker_params
    assert large.speaker_encoder_params > small.speaker_encoder_params  # enc_dim 2048
    base = footprint_for_model("Qwen/Qwen3-TTS-12Hz-1.7B-Base")
    assert base.talker_weight_bytes("bfloat16") == large.talker_weight_bytes("bfloat16")


def test_a_checkpoint_directory_gives_its_kind(tmp_path):
    path = make_checkpoint("tiny", tmp_path / "tiny-base", kind="base")
    assert footprint_for_model(str(path)).kind == "base"


@pytest.mark.parametrize("size", ["0.6b", "1.7b"])
def test_a_stage_in_the_checkpoints_dtype_does_not_count_its_mapped_text_embedding(size):
    fp = footprint_for_model(size)
    assert fp.mapped_params == 151_936 * 2048 and fp.mapped_dtype == "bfloat16"
    dropped = fp.mapped_params * 2
    for weights in ("model", "int8", "int4"):
        held = fp.talker_weight_bytes("bfloat16", weights)
        assert held + dropped == 2 * (
            fp.talker_params - fp.talker_linear_params + fp.speaker_encoder_params
        ) + fp.tokenizer_encoder_params * 2 + int(
            fp.talker_linear_params * {"model": 2, "int8": 1, "int4": 0.625}[weights]
        )
