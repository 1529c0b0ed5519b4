"""A small code predictor in vLLM-Omni's real class, and its inputs, for the predictor tests.

Imports vLLM-Omni: only modules that `importorskip` the runtime first import it.
"""

from __future__ import annotations

import types

import torch
from vllm_omni.model_executor.models.qwen3_tts.configuration_qwen3_tts import (
    Qwen3TTSTalkerCodePredictorConfig,
    Qwen3TTSTalkerConfig,
)
from vllm_omni.model_executor.models.qwen3_tts.qwen3_tts_code_predictor_vllm import (
    Qwen3TTSTalkerCodePredictorForConditionalGenerationVLLM as CodePredictor,
)

VOCAB = 64
GROUPS = 16


def make_predictor(
    talker_hidden: int, hidden: int = 64, vocab: int = VOCAB, kv_heads: int = 2
) -> CodePredictor:
    """A small code predictor in the real class; talker_hidden != hidden adds the projection."""
    config = Qwen3TTSTalkerCodePredictorConfig(
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=kv_heads,
        head_dim=32,
        vocab_size=vocab,
        num_code_groups=GROUPS,
    )
    return random_predictor(config, talker_hidden, std=0.2).double().eval()


def random_predictor(
    config: Qwen3TTSTalkerCodePredictorConfig, talker_hidden: int, std: float
) -> CodePredictor:
    """The real class on `config` below a talker `talker_hidden` wide, each parameter drawn
    from N(0, std²) with seed 0, in float32."""
    talker = Qwen3TTSTalkerConfig(
        hidden_size=talker_hidden,
        num_code_groups=config.num_code_groups,
        code_predictor_config=config.to_dict(),
    )
    predictor = CodePredictor(
        vllm_config=types.SimpleNamespace(model_config=None), config=config, talker_config=talker
    )
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in predictor.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * std)
    return predictor


def inputs(bsz: int, talker_hidden: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(bsz)
    return {
        "layer0_code": torch.randint(0, VOCAB, (bsz, 1), generator=generator),
        "layer0_embed": torch.randn(bsz, 1, talker_hidden, generator=generator).double(),
        "last_talker_hidden": torch.randn(bsz, 1, talker_hidden, generator=generator).double(),
    }
