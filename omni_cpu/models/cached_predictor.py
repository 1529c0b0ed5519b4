"""A KV-cached forward for vLLM-Omni's Qwen3 code predictor, for CPU.

Written against vllm-omni 0.30.0 (`models/common/qwen3_code_predictor.py`).
Each talker step, the code predictor samples the 15 residual codebooks one at a
time. vLLM-Omni's `CodePredictorWrapper.forward` re-runs the whole 17-position
buffer through its 5 layers at every one of those steps (no KV cache): on a
GPU that is one graph replay, on a CPU it turns each step into a 17-row GEMM,
several times one row's cost, and a frame's 15 steps into many times the 80 ms of
audio it makes (benchmarks/RESULTS.md, "Make it fast: each change, before and after").

This forward keeps each layer's keys and values for the current frame and runs
only the new position through the layers. Causal attention makes the result the
same function of the inputs: position `i` never sees positions after it, so
what the re-prefill recomputes for positions `0..step` is what the cache holds.
It uses the wrapper's own modules (weights, norms, rotary tables, embeddings,
heads) and its own sampler, so sampling draws the same random numbers in the
same order. Anything it does not cover (the stored-projection return used by
Qwen3-Omni) stays on the stock forward.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class FrameCache:
    """Keys and values of every layer for the positions of one frame so far."""

    def __init__(self, model: Any, bsz: int, max_seq: int, dtype: torch.dtype) -> None:
        attn = model.layers[0].self_attn
        shape = (len(model.layers), bsz, attn.num_kv_heads, max_seq, attn.head_dim)
        self.keys = torch.empty(shape, dtype=dtype)
        self.values = torch.empty(shape, dtype=dtype)


def _layer_forward(
    layer: Any,
    index: int,
    hidden: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    cache: FrameCache,
    start: int,
) -> torch.Tensor:
    """One decoder layer for positions `start..start+n` of `hidden` [B, n, H]."""
    attn = layer.self_attn
    bsz, n, _ = hidden.shape
    residual = hidden
    qkv = attn.qkv_proj(layer.input_layernorm(hidden))
    q_raw, k_raw, v_raw = qkv.split([attn._q_size, attn._kv_size, attn._kv_size], dim=-1)
    q = attn.q_norm(q_raw.reshape(bsz, n, attn.num_heads, attn.head_dim)).transpose(1, 2)
    k = attn.k_norm(k_raw.reshape(bsz, n, attn.num_kv_heads, attn.head_dim)).transpose(1, 2)
    v = v_raw.reshape(bsz, n, attn.num_kv_heads, attn.head_dim).transpose(1, 2)
    q = q * cos + _rotate_half(q) * sin
    k = k * cos + _rotate_half(k) * sin
    end = start + n
    cache.keys[index, :, :, start:end] = k
    cache.values[index, :, :, start:end] = v
    # The cache is filled from position 0, so for the first call (start == 0) the
    # causal mask is the usual lower triangle; one new query attends to all.
    out = F.scaled_dot_product_attention(
        q,
        cache.keys[index, :, :, :end],
        cache.values[index, :, :, :end],
        scale=attn.scaling,
        is_causal=n > 1,
        enable_gqa=attn.is_gqa,
    )
    hidden = residual + attn.o_proj(out.transpose(1, 2).reshape(bsz, n, -1))
    return hidden + layer.mlp(layer.post_attention_layernorm(hidden))


def _model_forward(
    model: Any, embeds: torch.Tensor, cache: FrameCache, start: int, positions: torch.Tensor
) -> torch.Tensor:
    """The inner transformer on new positions only; returns the last position's state."""
    cos, sin = model.rotary_emb(embeds, positions)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    hidden = embeds
    for index, layer in enumerate(model.layers):
        hidden = _layer_forward(layer, index, hidden, cos, sin, cache, start)
    return model.norm(hidden[:, -1, :])


@torch.inference_mode()
def cached_forward(self: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
    """`CodePredictorWrapper.forward` (0.30.0 semantics) with a per-frame KV cache."""
    return predict_codes(self, _ExactRunner(self.model), *args, **kwargs)


class _ExactRunner:
    """Runs new positions through the wrapper's own modules: stock rounding, any dtype."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def __call__(
        self, embeds: torch.Tensor, cache: FrameCache, start: int, positions: torch.Tensor
    ) -> torch.Tensor:
        return _model_forward(self.model, embeds, cache, start, positions)


def predict_codes(
    self: Any,
    run: Any,
    layer0_code: torch.Tensor,
    layer0_embed: torch.Tensor,
    last_talker_hidden: torch.Tensor,
    do_sample: bool = True,
    temperature: float = 0.9,
    top_k: int = 50,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    generators: Sequence[torch.Generator | None] | None = None,
    sample_uniforms: torch.Tensor | None = None,
) -> torch.Tensor:
    """The wrapper's sampling loop over 15 residual codebooks; `run` computes the positions.

    `run(embeds [B, n, H], cache, start, positions [B, n])` returns the normed
    hidden state of the last new position [B, H]. A `run.frame(self, first, codes,
    use_sampling, inv_temperature, top_k, generator, uniforms)` that returns True has
    filled the codes itself (the whole loop below in one call).
    """
    bsz = int(layer0_code.shape[0])
    num_groups = self._num_groups
    _check_draw_inputs(self, bsz, generators, sample_uniforms)
    sample_generator = generators if generators is not None else generator
    self._setup_compile()  # caches dtype, head and embedding lists (eager on CPU)
    dtype = self._model_dtype
    projection = self.small_to_mtp_projection

    stored_mode = self._wrapper_config.sampling_mode == "stored"
    use_sampling = do_sample and temperature > 0
    # Where vLLM-Omni 0.30.0's loop raises (top-p below 1, top-k past the vocabulary), this
    # one samples as qwen-tts 0.1.1's code predictor does (transformers' top-k, then top-p)
    # and as vLLM's talker takes a top-k past its vocabulary (no limit): a request's own
    # sampling (omni_cpu.platform.request_sampling) must not fail the stage.
    if top_k >= int(self.config.vocab_size):
        top_k = 0
    nucleus = use_sampling and not stored_mode and top_p < 1.0
    inv_temperature = 1.0 / max(temperature, 1e-6) if use_sampling else 0.0

    all_codes = torch.empty(bsz, num_groups, dtype=torch.long, device=layer0_code.device)
    all_codes[:, 0] = layer0_code.reshape(bsz)
    first = torch.cat(
        (
            projection(last_talker_hidden.reshape(bsz, 1, -1).to(dtype)),
            projection(layer0_embed.reshape(bsz, 1, -1).to(dtype)),
        ),
        dim=1,
    )
    # A runner that does the whole frame itself (predictor_step.StepRunner) returns
    # False, having drawn nothing, where it does not cover these settings.
    frame = getattr(run, "frame", None)
    if frame is not None and not stored_mode and not nucleus:
        arguments = (use_sampling, inv_temperature, top_k, sample_generator, sample_uniforms)
        if frame(self, first, all_codes, *arguments):
            return all_codes
    cache = FrameCache(self.model, bsz, num_groups + 1, dtype)
    positions = torch.arange(num_groups + 1).unsqueeze(0).expand(bsz, -1)
    hidden = run(first, cache, 0, positions[:, :2])
    for step in range(1, num_groups):
        logits = self._lm_heads_list[step - 1](hidden)
        step_uniforms = sample_uniforms[:, step - 1, :] if sample_uniforms is not None else None
        if stored_mode:
            code = _sample_stored(self, logits, sample_generator, step_uniforms)
        elif use_sampling:
            scaled = _filtered(logits * inv_temperature, top_k, top_p if nucleus else 1.0)
            code = self._sample_codes_gumbel(
                scaled, generator=sample_generator, uniforms=step_uniforms
            )
        else:
            code = logits.argmax(dim=-1, keepdim=True)
        all_codes[:, step] = code.reshape(bsz)
        if step < num_groups - 1:
            embed = projection(self._codec_embeds_list[step - 1](code).reshape(bsz, 1, -1))
            position = positions[:, step + 1 : step + 2]
            hidden = run(embed, cache, step + 1, position)
    return all_codes


def _check_draw_inputs(
    self: Any,
    bsz: int,
    generators: Sequence[torch.Generator | None] | None,
    sample_uniforms: torch.Tensor | None,
) -> None:
    """ValueError where per-row generators or drawn uniforms do not fit a batch of `bsz`."""
    if generators is not None and len(generators) != bsz:
        raise ValueError(f"generators must have one entry per row: {len(generators)} for {bsz}")
    if sample_uniforms is not None:
        expected = (bsz, self._num_groups - 1, int(self.config.vocab_size))
        if tuple(sample_uniforms.shape) != expected:
            got = tuple(sample_uniforms.shape)
            raise ValueError(f"sample_uniforms must have shape {expected}, got {got}")


def _filtered(scaled: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """`scaled` logits with -inf outside the top `top_k` (0: all), then outside the nucleus
    `top_p` (1: all), as transformers orders them."""
    if top_k > 0:
        topk_vals, _ = scaled.topk(top_k, dim=-1)
        scaled = scaled.masked_fill(scaled < topk_vals[:, -1:], float("-inf"))
    if top_p < 1.0:
        scaled = _top_p_filter(scaled, top_p)
    return scaled


def _sample_stored(
    self: Any, logits: torch.Tensor, generator: Any, uniforms: torch.Tensor | None
) -> torch.Tensor:
    """The wrapper's "stored" sampling: top-k, then top-p, then Gumbel-max."""
    if self._top_k > 0:
        topk_vals, _ = logits.topk(self._top_k, dim=-1)
        logits = logits.masked_fill(logits < topk_vals[:, -1:], float("-inf"))
    if self._top_p < 1.0:
        logits = _top_p_filter(logits, self._top_p)
    return self._sample_codes_gumbel(logits, generator=generator, uniforms=uniforms)


def _top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """`logits` with -inf past the smallest set of codes whose probability reaches `top_p`."""
    sorted_logits, sorted_idx = logits.sort(dim=-1, descending=True)
    sorted_probs = F.softmax(sorted_logits, dim=-1, dtype=torch.float32)
    remove = (sorted_probs.cumsum(dim=-1) - sorted_probs) >= top_p
    sorted_logits[remove] = float("-inf")
    return sorted_logits.scatter(1, sorted_idx, sorted_logits)
