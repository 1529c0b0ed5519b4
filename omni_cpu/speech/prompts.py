"""Talker prompts per task type, built the way vLLM-Omni builds them (vllm-omni 0.30.0).

The talker replaces every prompt embedding in its own `preprocess`, so the prompt
ids are placeholders, but their count must equal the embeddings it will build, or
the request is padded or cut. vLLM-Omni's speech server and its offline example
both size them with `Qwen3TTSPromptEmbedsBuilder.estimate_prompt_len_from_additional_information`;
so does this module, for CustomVoice, VoiceDesign and Base (in-context cloning reads
the reference's codec frame count from `ref_code_length`, as the server sends it).

`launch/` calls `PromptBuilder(model).prompt(info)` and `request_index(request_id)`:
the only two things it needs from vLLM-Omni's prompt conventions. `check_prompt_lengths`
refuses, before any engine starts, a prompt the talker would refuse: the length is
vLLM-Omni's own estimate, so a prompt refused here is exactly one the engine would
refuse, only without loading an engine first. Imports vLLM-Omni only inside
`PromptBuilder`.
"""

from __future__ import annotations

from typing import Any

from omni_cpu.errors import InputError
from omni_cpu.speech.request import SpeechRequest


def request_index(request_id: str) -> int:
    """The prompt's position in its `generate` call: vllm-omni 0.30.0 names requests
    f"{index}_{uuid4}" in prompt order."""
    return int(request_id.split("_", 1)[0])


def _task_type(info: dict[str, Any]) -> str:
    value = info.get("task_type") or ["CustomVoice"]
    return str(value[0] if isinstance(value, list) else value)


class PromptBuilder:
    """Placeholder prompt ids of the length the talker will embed, for one model."""

    def __init__(self, model: str) -> None:
        from transformers import AutoTokenizer
        from vllm_omni.model_executor.models.qwen3_tts.configuration_qwen3_tts import (
            Qwen3TTSConfig,
        )

        self._tokenizer = AutoTokenizer.from_pretrained(model, padding_side="left")
        self._talker_config = getattr(Qwen3TTSConfig.from_pretrained(model), "talker_config", None)

    def prompt_length(self, info: dict[str, Any]) -> int:
        """How many embeddings the talker builds for `additional_information` `info`."""
        from vllm_omni.model_executor.models.qwen3_tts.prompt_embeds_builder import (
            Qwen3TTSPromptEmbedsBuilder,
        )

        return Qwen3TTSPromptEmbedsBuilder.estimate_prompt_len_from_additional_information(
            additional_information=info,
            task_type=_task_type(info),
            tokenize_prompt=lambda text: self._tokenizer(text, padding=False)["input_ids"],
            codec_language_id=getattr(self._talker_config, "codec_language_id", None),
            spk_is_dialect=getattr(self._talker_config, "spk_is_dialect", None),
        )

    def prompt(self, info: dict[str, Any]) -> dict[str, Any]:
        """The prompt `Omni.generate` takes for one request's `additional_information`."""
        return {"prompt_token_ids": [0] * self.prompt_length(info), "additional_information": info}


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


def check_prompt_lengths(builder: Any, requests: list[SpeechRequest], max_model_len: int) -> None:
    """InputError for the first request whose prompt the talker would refuse.

    `builder` is a PromptBuilder.
    """
    for number, request in enumerate(requests, start=1):
        reason = over_context(
            builder.prompt_length(request.additional_information()), max_model_len
        )
        if reason is not None:
            where = f"utterance {number}: " if len(requests) > 1 else ""
            raise InputError(
                where + reason,
                "split the text into shorter utterances (--text-file: one per line) "
                "or plan a larger max_model_len",
            )
