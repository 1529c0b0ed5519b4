"""The talker stage chooses what the official qwen-tts 0.1.1 chooses where vLLM-Omni differs.

On the tiny CustomVoice checkpoint, loaded in float32 as the stage loads it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("vllm_omni", reason="the inference runtime is not installed")

import numpy as np
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


def float32_encoder_codes(checkpoint: Path, samples: np.ndarray) -> torch.Tensor:
    """A clip's codes [frames, 16] from the speech tokenizer's encoder built afresh in float32.

    What qwen-tts 0.1.1 loaded in float32 encodes (checked against it: 512 of 512 codes).
    """
    from safetensors import safe_open
    from transformers import AutoFeatureExtractor
    from vllm_omni.model_executor.models.qwen3_tts.tokenizer_12hz import (
        configuration_qwen3_tts_tokenizer_v2 as configuration,
    )
    from vllm_omni.model_executor.models.qwen3_tts.tokenizer_12hz import (
        modeling_qwen3_tts_tokenizer_v2 as modeling,
    )

    folder = str(checkpoint)
    config = configuration.Qwen3TTSTokenizerV2Config.from_pretrained(
        folder, subfolder="speech_tokenizer"
    )
    encoder = modeling.Qwen3TTSTokenizerV2Encoder._from_config(config.encoder_config)
    with safe_open(str(checkpoint / "speech_tokenizer" / "model.safetensors"), "pt") as handle:
        state = {
            key.removeprefix("encoder."): handle.get_tensor(key).float()
            for key in handle.keys()  # noqa: SIM118 - safe_open has no iterator
            if key.startswith("encoder.")
        }
    encoder.float().eval().load_state_dict(state, strict=False)
    extractor = AutoFeatureExtractor.from_pretrained(folder, subfolder="speech_tokenizer")
    values = extractor(raw_audio=[samples], sampling_rate=24000, return_tensors="pt")
    with torch.inference_mode():
        encoded = encoder.encode(
            input_values=values["input_values"].squeeze(1).unsqueeze(1), return_dict=True
        )
    codes = encoded.audio_codes[0, : int(config.encoder_valid_num_quantizers)]
    frames = -(-samples.size // int(config.encode_downsample_rate))
    return codes[:, :frames].t().long()


def test_a_float32_talker_encodes_reference_audio_as_a_float32_encoder_does(
    tiny_kinds: dict[str, Path],
) -> None:
    # vLLM-Omni 0.30.0 encodes in bf16 whatever the talker's dtype (72.9 % of the codes
    # qwen-tts float32 makes of a clip, so in-context cloning differed from frame 0).
    checkpoint = tiny_kinds["base"]
    t = np.arange(int(2.5 * 24000)) / 24000
    clip = (0.3 * np.sin(2 * np.pi * 180 * t) * np.sin(2 * np.pi * 3 * t)).astype(np.float32)
    model = load_talker(checkpoint, "model", "float32").model
    codes = model._prompt_builder.encode_ref_audio_to_code(clip, 24000)
    assert torch.equal(codes, float32_encoder_codes(checkpoint, clip))
