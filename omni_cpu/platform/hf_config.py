"""Tell transformers about Qwen3-TTS's config class before vLLM-Omni first reads a checkpoint.

vLLM-Omni 0.30.0's `Omni()` asks vLLM for the checkpoint's config (to guess the
pipeline) before it registers its own config classes with transformers. That first
read fails on `model_type: qwen3_tts`, is retried through vLLM's `with_retry`
(two `ERROR ... Transformers does not recognize this architecture` lines and a
2 s sleep), and its failure is then ignored. Registering the class first makes
the read succeed: no ERROR lines and 2 s less start-up.
"""

from __future__ import annotations


def register_qwen3_tts_config() -> None:
    """Register `qwen3_tts` with transformers' AutoConfig (a no-op when already there)."""
    from transformers import AutoConfig
    from vllm_omni.model_executor.models.qwen3_tts.configuration_qwen3_tts import (
        Qwen3TTSConfig,
    )

    AutoConfig.register(Qwen3TTSConfig.model_type, Qwen3TTSConfig, exist_ok=True)
