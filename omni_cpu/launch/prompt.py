"""The check of talker prompts against the talker's context, before any engine starts.

The length is vLLM-Omni's own estimate of what the talker embeds (text tokens
plus the codec prefix; omni_cpu.platform.prompts), so a prompt refused here is
exactly one the engine would refuse, only without loading an engine first.
"""

from __future__ import annotations

from typing import Any

from omni_cpu.errors import InputError
from omni_cpu.launch.request import SpeechRequest


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

    `builder` is an omni_cpu.platform.prompts.PromptBuilder.
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
