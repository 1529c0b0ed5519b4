"""Opt-in changes to vLLM-Omni's speech server behaviour (vllm-omni 0.30.0), loaded in its process.

`accept_frame_limit`: vLLM-Omni answers a Base (voice clone) request whose talker
reaches its frame budget without emitting end-of-speech with HTTP 500 ("did not
emit codec EOS before its token budget"), and cuts a stream short. Random-weight
checkpoints never emit end-of-speech, so without this no Base request on them
returns audio. With `omni-cpu serve --accept-frame-limit` the audio made up to the
budget is returned, as it is for CustomVoice and VoiceDesign. Real checkpoints
rarely reach the budget; leave it off for them so a runaway clone stays an error.
"""

from __future__ import annotations

from typing import Any


def accept_frame_limit() -> None:
    """Let a Base request that reaches its frame budget return its audio instead of a 500."""
    from vllm_omni.entrypoints.openai.tts_adapters.qwen3_tts import Qwen3TTSAdapter

    def validate_generation(self: Any, tts_params: Any, **_: Any) -> None:
        return None

    Qwen3TTSAdapter.validate_generation = validate_generation  # type: ignore[method-assign]
    Qwen3TTSAdapter.validates_generation = False
