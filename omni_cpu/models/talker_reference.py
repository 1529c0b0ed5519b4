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
    return applied


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
