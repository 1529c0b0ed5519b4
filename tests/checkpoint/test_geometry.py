"""The frame length's one home agrees with the tokenizer's config the checkpoints carry."""

from __future__ import annotations

import pytest

from omni_cpu.checkpoint import configs, geometry


@pytest.mark.parametrize("size", ["tiny", "0.6b", "1.7b"])
def test_the_geometry_is_the_speech_tokenizers_config(size: str) -> None:
    tokenizer = configs.speech_tokenizer_config(size)
    assert tokenizer["decode_upsample_rate"] == geometry.FRAME_SAMPLES
    assert tokenizer["output_sample_rate"] == geometry.SAMPLE_RATE
    assert geometry.FRAME_MS == 80.0  # 12.5 Hz
