"""Talker prompts: their token length, and the check against the talker's context.

The length is vLLM-Omni's own estimate of what the talker embeds (text tokens
plus the codec prefix), so a prompt refused here is exactly one the engine would
refuse, only without loading an engine first. Imports transformers and
vLLM-Omni's prompt builder (seconds), never torch engines.
"""

from __future__ import annotations

from typing import Any

from omni_cpu.errors import InputError
from omni_cpu.launch.request import SpeechRequest


class PromptBuilder:
    """Placeholder prompt ids of the length the talker will embed (vLLM-Omni's own estimate)."""

    def __init__(self, model: str) -> None:
        from transformers import AutoTokenizer
        from vllm_omni.model_executor.models.qwen3_tts.configuration_qwen3_tts import (
            Qwen3TTSConfig,
        )

        self._tokenizer = AutoTokenizer.from_pretrained(model, padding_side="left")
        self._talker_config = getattr(Qwen3TTSConfig.from_pretrained(model), "talker_config", None)

    def length(self, request: SpeechRequest) -> int:
        """Prompt positions the talker needs for `request` before its first frame."""
        from vllm_omni.model_executor.models.qwen3_tts.prompt_embeds_builder import (
            Qwen3TTSPromptEmbedsBuilder,
        )

        return Qwen3TTSPromptEmbedsBuilder.estimate_prompt_len_from_additional_information(
            additional_information=request.additional_information(),
            task_type="CustomVoice",
            tokenize_prompt=lambda text: self._tokenizer(text, padding=False)["input_ids"],
            codec_language_id=getattr(self._talker_config, "codec_language_id", None),
            spk_is_dialect=getattr(self._talker_config, "spk_is_dialect", None),
        )

    def prompt(self, request: SpeechRequest) -> dict[str, Any]:
        return {
            "prompt_token_ids": [0] * self.length(request),
            "additional_information": request.additional_information(),
        }


def over_context(length: int, max_model_len: int) -> str | None:
    """Why a prompt of `length` positions does not fit the talker's context, or None.

    The talker needs the prompt plus at least one position to sample a frame in.
    """
    if length < max_model_len:
        return None
    return (
        f"the text needs {length} talker positions; this talker's context is "
        f"{max_model_len} (max_model_len), so at most {max_model_len - 1}"
    )


def check_prompt_lengths(
    builder: PromptBuilder, requests: list[SpeechRequest], max_model_len: int
) -> None:
    """InputError for the first request whose prompt the talker would refuse."""
    for number, request in enumerate(requests, start=1):
        reason = over_context(builder.length(request), max_model_len)
        if reason is not None:
            where = f"utterance {number}: " if len(requests) > 1 else ""
            raise InputError(
                where + reason,
                "split the text into shorter utterances (--text-file: one per line) "
                "or plan a larger max_model_len",
            )
