"""Where vLLM-Omni's Qwen3-TTS talker departs from the official `qwen-tts`, put back.

Written against vllm-omni 0.30.0 (`Qwen3TTSTalkerForConditionalGeneration`'s
`_codec_disallowed_mask`; `_prompt_builder.build_prompt_embeds` taking `task_type` and
`info_dict`; `talker_config.spk_is_dialect` and `codec_language_id`) and qwen-tts 0.1.1
(`Qwen3TTSForConditionalGeneration.generate`).

Why: greedy float32 codes of the two agree bit for bit except in two places
(benchmarks/vs_reference.py measures it):
- layer-0 code 0: the reference suppresses only the control ids above the codebook
  (0-2047 and end-of-speech may be sampled); vLLM-Omni's mask allows 1-2047, so where
  code 0 wins a frame it emits another code and everything after differs;
- a dialect speaker (dylan, eric) asked for Chinese: the reference takes the speaker's
  dialect tag for `chinese` and `auto`; vLLM-Omni only for `auto`, so its prompt holds
  the Chinese tag and the codes differ from frame 0. Both prompts are 4 tags long, so
  vLLM-Omni's prompt-length estimate stays right.

And where a Base model turns reference audio into codes (the speech tokenizer's encoder,
for in-context cloning): vLLM-Omni runs that encoder in bfloat16 whatever the talker's
dtype (`self.encoder.to(dtype=torch.bfloat16)`, input cast to bf16 in
`_encode_ref_audio_batch`), which also rounds its transformer's rotary table (`inv_freq`);
qwen-tts runs it in the model's dtype, and transformers keeps that table float32 even in a
bf16 model. Here the table is recomputed in float32 and the encode feeds the encoder its own
dtype, so a float32 stage whose encoder omni_cpu.platform.talker_load put back in float32
encodes as qwen-tts float32 does, and a bf16 one as qwen-tts bf16 does (benchmarks/RESULTS.md,
"why Base in-context cloning differed from qwen-tts").
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import torch

# The languages for which qwen-tts 0.1.1 replaces the tag with a dialect speaker's own.
DIALECT_LANGUAGES = ("chinese", "auto")


def install(model: Any) -> list[str]:
    """Apply each fix `model` (a loaded talker) needs; the names of those applied."""
    applied = []
    if allow_code_zero(model):
        applied.append("code-zero")
    if speak_dialect_for_chinese(model):
        applied.append("dialect")
    if float32_encoder_rope(model):
        applied.append("encoder-rope")
    if encode_in_encoder_dtype(model):
        applied.append("encoder-dtype")
    return applied


def encode_in_encoder_dtype(model: Any) -> bool:
    """Make the reference-audio encode feed the encoder its own dtype; whether installed.

    vLLM-Omni 0.30.0's `_encode_ref_audio_batch`, with the encoder's dtype for its bf16.
    """
    builder = getattr(model, "_prompt_builder", None)
    encoder = getattr(model, "encoder", None)
    extractor = getattr(model, "_encoder_feature_extractor", None)
    if builder is None or not isinstance(encoder, torch.nn.Module) or extractor is None:
        return False

    def encode(wavs: list[Any], sr: int, *, device: torch.device) -> list[torch.Tensor]:
        from vllm.multimodal.audio import AudioResampler

        target_sr = int(extractor.sampling_rate)
        if int(sr) != target_sr:
            resampler = AudioResampler(target_sr=target_sr)
            wavs = [resampler.resample(w.astype("float32"), orig_sr=int(sr)) for w in wavs]
        inputs = extractor(raw_audio=wavs, sampling_rate=target_sr, return_tensors="pt")
        dtype = next(encoder.parameters()).dtype
        values = inputs["input_values"].squeeze(1).to(device=device, dtype=dtype)
        downsample = int(model._encoder_downsample_rate)
        lengths = [(int(wav.size) + downsample - 1) // downsample for wav in wavs]
        with torch.inference_mode():
            encoded = encoder.encode(input_values=values.unsqueeze(1), return_dict=True)
        codes = encoded.audio_codes[:, : int(model._encoder_valid_num_quantizers)]
        return [
            code[:, :length].transpose(0, 1).to(dtype=torch.long).contiguous()
            for code, length in zip(codes, lengths, strict=True)
        ]

    model._encode_ref_audio_batch = encode
    builder._encode_ref_audio_batch_fn = encode  # the builder holds the bound method itself
    return True


def float32_encoder_rope(model: Any) -> bool:
    """Give the speech tokenizer encoder's rotary tables back their float32 values; any changed."""
    encoder = getattr(model, "encoder", None)
    if not isinstance(encoder, torch.nn.Module):
        return False
    changed = False
    for module in encoder.modules():
        table = getattr(module, "inv_freq", None)
        compute = getattr(module, "compute_default_rope_parameters", None)
        if not isinstance(table, torch.Tensor) or compute is None:
            continue
        if getattr(module, "rope_type", "default") != "default":
            continue
        fresh = compute(module.config, table.device)[0].float()
        if table.dtype == torch.float32 and torch.equal(table, fresh):
            continue
        module.inv_freq = fresh
        module.original_inv_freq = fresh.clone()
        changed = True
    return changed


def allow_code_zero(model: Any) -> bool:
    """Let layer-0 code 0 through the talker's logit mask; whether the mask barred it."""
    mask = getattr(model, "_codec_disallowed_mask", None)
    if not isinstance(mask, torch.Tensor) or mask.numel() == 0 or not bool(mask[0]):
        return False
    mask[0] = False
    return True


def dialect_language(info_dict: dict[str, Any], dialects: dict[str, Any]) -> str | None:
    """The dialect a CustomVoice request's speaker speaks when it asks for Chinese, else None."""
    language = (info_dict.get("language") or ["Auto"])[0]
    speaker = (info_dict.get("speaker") or [""])[0]
    if not isinstance(language, str) or language.lower() not in DIALECT_LANGUAGES:
        return None
    if not isinstance(speaker, str) or not speaker.strip():
        return None
    dialect = dialects.get(speaker.lower())
    return dialect if isinstance(dialect, str) and dialect else None


def speak_dialect_for_chinese(model: Any) -> bool:
    """Make a Chinese request to a dialect speaker carry its dialect's tag; whether installed."""
    builder = getattr(model, "_prompt_builder", None)
    config = getattr(model, "talker_config", None)
    dialects = getattr(config, "spk_is_dialect", None) or {}
    languages = getattr(config, "codec_language_id", None) or {}
    if builder is None or not any(isinstance(d, str) and d in languages for d in dialects.values()):
        return False
    original: Callable[..., Any] = builder.build_prompt_embeds

    def build_prompt_embeds(self: Any, *, task_type: str, info_dict: dict[str, Any]) -> Any:
        dialect = dialect_language(info_dict, dialects) if task_type == "CustomVoice" else None
        if dialect is not None and dialect in languages:
            info_dict["language"] = [dialect]  # the builder consumes this dict anyway
        return original(task_type=task_type, info_dict=info_dict)

    builder.build_prompt_embeds = types.MethodType(build_prompt_embeds, builder)
    return True
