"""The talker stage chooses what the official qwen-tts 0.1.1 chooses where vLLM-Omni differs.

On the tiny CustomVoice checkpoint, loaded in float32 as the stage loads it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("vllm_omni", reason="the inference runtime is not installed")

import torch

from omni_cpu.platform.inprocess import Talker, load_talker

pytestmark = [pytest.mark.core_model, pytest.mark.cpu]


@pytest.fixture(scope="module")
def talker(tiny_kinds: dict[str, Path]) -> Talker:
    return load_talker(tiny_kinds["custom-voice"], "model", "float32")


def request(language: str, speaker: str) -> dict[str, list[str]]:
    return {
        "task_type": ["CustomVoice"],
        "text": ["你好，今天天气很好。"],
        "language": [language],
        "speaker": [speaker],
    }


def test_layer0_code_zero_may_be_chosen_like_every_other_code(talker: Talker) -> None:
    embeds = torch.randn(
        4, talker.model.talker_config.hidden_size, generator=torch.Generator().manual_seed(0)
    )
    _, logits = talker.forward(embeds, reset=True)
    open_codes = torch.isfinite(logits).nonzero().reshape(-1).tolist()
    # qwen-tts suppresses only the control ids above the codebook, end-of-speech excepted.
    assert open_codes == [*range(talker.codebook_size), talker.eos_id]


@pytest.mark.parametrize(
    ("speaker", "dialect"), [("dylan", "beijing_dialect"), ("eric", "sichuan_dialect")]
)
def test_a_dialect_speaker_asked_for_chinese_gets_its_dialect_tag(
    talker: Talker, speaker: str, dialect: str
) -> None:
    chinese = talker.prompt(request("Chinese", speaker)).embeds
    assert torch.equal(chinese, talker.prompt(request(dialect, speaker)).embeds)
    assert torch.equal(chinese, talker.prompt(request("Auto", speaker)).embeds)


def test_a_plain_speaker_asked_for_chinese_keeps_the_chinese_tag(talker: Talker) -> None:
    chinese = talker.prompt(request("Chinese", "vivian")).embeds
    assert not torch.equal(chinese, talker.prompt(request("beijing_dialect", "vivian")).embeds)


def test_the_reference_audio_encoders_rotary_table_is_float32_as_transformers_computes_it(
    tiny_kinds: dict[str, Path],
) -> None:
    # vLLM-Omni 0.30.0 casts the whole encoder to bf16, table included; qwen-tts (transformers)
    # keeps the table float32, and with it the reference codes of a clip agree with qwen-tts bf16.
    model = load_talker(tiny_kinds["base"], "model", "float32").model
    tables = [m for m in model.encoder.modules() if hasattr(m, "inv_freq")]
    assert tables
    for rotary in tables:
        fresh, _ = rotary.compute_default_rope_parameters(rotary.config, None)
        assert rotary.inv_freq.dtype == torch.float32
        assert torch.equal(rotary.inv_freq, fresh.float())
