"""The code predictor's step in one C++ call: the default where omni-cpu's GEMV runs.

Written against vllm-omni 0.30.0 (`models/common/qwen3_code_predictor.py`: the
wrapper's layers, lm heads, codec embeddings, projection, `_setup_compile`'s lists and
`_sample_codes_gumbel`) and torch 2.13 (the extension, kernels/csrc/predictor_step.cpp).

Why a C++ step, what one call does, its rounding against FusedRunner
(omni_cpu.models.fused_predictor) and its threads: kernels/csrc/predictor_step.cpp's
header, the one place they are written. What it saves, per format and GEMV build:
benchmarks/RESULTS.md, "the kernels at one and two threads, against the libraries"; the
pipeline's talker step with it: RESULTS.md, "Speed (bench, talker core 0, code2wav core 1)".

This side: `StepRunner` builds one `PredictorStep` from the wrapper's own modules once, at
install (the norms' weights, the RoPE table, each linear's packed weights as the GEMV packed
them: the same tensors, no copy). Its `run` is FusedRunner's `__call__`; its `frame` runs a
whole frame with per-call sampling on random numbers drawn here in the stock order
(`gumbel_noise`), so a seeded request gives the codes the Python loop gives. "stored"
sampling (top-p; Qwen3-Omni) and anything else the frame does not cover run predict_codes'
loop over `run`; tests/models/test_predictor_step.py states the bounds of agreement.

Only where every layer's four linears went to one GEMV module (bf16, int8 or int4
weights): elsewhere (OMNI_CPU_GEMV=off, float32 weights on oneDNN, FBGEMM's int8, no
AVX2) `build` returns None and the dispatcher (omni_cpu.models.predictor) installs
FusedRunner, unchanged.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from omni_cpu.kernels import gemv
from omni_cpu.models.cached_predictor import FrameCache
from omni_cpu.models.linears import RoutedLinear

STEP_DTYPES = (torch.bfloat16, torch.float32)
# kernels/csrc/predictor_step.cpp's Format codes: the module states its own
# (`predictor_step_formats`), and a module whose codes differ is not used (`matches`).
FORMAT_CODES = {"bf16": 0, "w8a8": 1, "w4a8": 2}
# The code of each kernel name linears.choose gives, for each GEMV module the step is built
# into (the one that packed the weights runs them).
STEP_FORMATS = {
    "avx512": {f"gemv-{name}": code for name, code in FORMAT_CODES.items()},
    "avx2": {f"gemv-avx2-{name}": code for name, code in FORMAT_CODES.items()},
}


def matches(module: Any) -> bool:
    """Whether `module`'s PredictorStep reads the format codes this side writes."""
    return getattr(module, "predictor_step_formats", None) == FORMAT_CODES


UNIFORM_EPS = 1e-20  # vLLM-Omni 0.30.0's _UNIFORM_EPS: uniform_(eps, 1 - eps)
# Gumbel noise is computed for a whole frame at once; with the vocabulary a multiple
# of torch's vector width every element goes through the same vectorized log as the
# per-step call's would (a tail element could take the scalar log, an ulp apart).
NOISE_VOCAB_MULTIPLE = 16

LinearSpec = tuple[int, torch.Tensor, Any, Any, Any, int]


def linear_spec(linear: Any, isa: str = "avx512") -> LinearSpec | None:
    """(format, packed, scales, sums, bias, amx_rows) of a linear the `isa` GEMV module took."""
    if not isinstance(linear, RoutedLinear) or linear.kernel not in STEP_FORMATS[isa]:
        return None
    product = linear.product
    bias = None if linear.bias is None else linear.bias.detach()
    codes = FORMAT_CODES
    if isinstance(product, gemv.PackedBf16Weights):
        return (codes["bf16"], product.packed, None, None, bias, product.amx_rows)
    if isinstance(product, gemv.PackedInt8Weights):
        scales, sums = product.scales, product.row_sums
        return (codes["w8a8"], product.packed, scales, sums, bias, product.amx_rows)
    if isinstance(product, gemv.PackedInt4Weights):
        return (codes["w4a8"], product.packed, product.scales, None, bias, 0)
    return None


def _norms(model: Any) -> list[Any]:
    norms = [model.norm]
    for layer in model.layers:
        attn = layer.self_attn
        norms += [layer.input_layernorm, layer.post_attention_layernorm, attn.q_norm, attn.k_norm]
    return norms


class StepRunner:
    """FusedRunner's interface (and a whole frame) on one C++ PredictorStep."""

    def __init__(self, step: Any, frames: bool) -> None:
        self.step = step
        self.frames = frames  # lm heads, embeddings and projection are in the step too

    @classmethod
    def build(cls, wrapper: Any) -> StepRunner | None:
        """The step for `wrapper`'s code predictor, or None where it does not apply."""
        model = wrapper.model
        first = model.layers[0].self_attn.qkv_proj
        kernel = getattr(first, "kernel", "")
        isa = next((isa for isa, names in STEP_FORMATS.items() if kernel in names), None)
        if isa is None:
            return None
        module = gemv.kernel() if isa == "avx512" else gemv.avx2_kernel()
        if module is None or not hasattr(module, "PredictorStep") or not matches(module):
            return None
        dtype = model.norm.weight.dtype
        norms = _norms(model)
        eps = {float(norm.variance_epsilon) for norm in norms}
        if dtype not in STEP_DTYPES or len(eps) != 1:
            return None
        if any(norm.weight.dtype != dtype for norm in norms):
            return None
        layers = []
        for layer in model.layers:
            attn, mlp = layer.self_attn, layer.mlp
            modules = (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj)
            specs = [linear_spec(m, isa) for m in modules]
            if any(spec is None for spec in specs):
                return None
            layers.append((layer, specs))
        attn = model.layers[0].self_attn
        rotary = model.rotary_emb
        half = attn.head_dim // 2
        cos_sin = torch.cat((rotary.cos_cached[:, :half], rotary.sin_cached[:, :half]), dim=-1)
        try:
            step = module.PredictorStep(
                int(model.norm.weight.numel()),
                int(attn.num_heads),
                int(attn.num_kv_heads),
                int(attn.head_dim),
                eps.pop(),
                float(attn.scaling),
                cos_sin.to(dtype).contiguous(),
                model.norm.weight.detach(),
            )
            for layer, specs in layers:
                step.add_layer(
                    layer.input_layernorm.weight.detach(),
                    layer.self_attn.q_norm.weight.detach(),
                    layer.self_attn.k_norm.weight.detach(),
                    layer.post_attention_layernorm.weight.detach(),
                    *specs,
                )
        except RuntimeError:  # a shape or dtype the step does not take: FusedRunner does
            return None
        return cls(step, _add_frame_parts(step, wrapper, dtype, isa))

    def __call__(
        self, embeds: torch.Tensor, cache: FrameCache, start: int, positions: torch.Tensor
    ) -> torch.Tensor:
        return self.step.run(embeds, cache.keys, cache.values, start)

    def frame(
        self,
        wrapper: Any,
        first: torch.Tensor,
        codes: torch.Tensor,
        use_sampling: bool,
        inv_temperature: float,
        top_k: int,
        generator: Any,
        uniforms: torch.Tensor | None,
    ) -> bool:
        """A whole frame's codes into `codes[:, 1:]`; False (nothing drawn) where not covered."""
        vocab = int(wrapper.config.vocab_size)
        if not self.frames:
            return False
        noise = None
        if use_sampling:
            if top_k > vocab or vocab % NOISE_VOCAB_MULTIPLE:
                return False  # top_k past the vocabulary: the loop samples it
            if uniforms is not None and uniforms.dtype != torch.float32:
                return False
            noise = gumbel_noise(wrapper, codes.shape[0], vocab, generator, uniforms)
        self.step.frame(first, codes, noise, inv_temperature, top_k if use_sampling else 0)
        return True


def _add_frame_parts(step: Any, wrapper: Any, dtype: torch.dtype, isa: str) -> bool:
    """Give the step the lm heads, embeddings and projection; False where one does not fit."""
    # The lists predict_codes samples through (cached by the wrapper's first forward).
    wrapper._setup_compile()
    projection = wrapper.small_to_mtp_projection
    embeddings = list(wrapper._codec_embeds_list)
    heads = [linear_spec(head, isa) for head in wrapper._lm_heads_list]
    if any(spec is None for spec in heads) or any(type(e) is not nn.Embedding for e in embeddings):
        return False
    if any(e.weight.dtype != dtype for e in embeddings) or len(heads) != len(embeddings):
        return False
    projection_spec = None
    if not isinstance(projection, nn.Identity):
        projection_spec = linear_spec(projection, isa)
        if projection_spec is None:
            return False
    try:
        for spec, embedding in zip(heads, embeddings, strict=True):
            step.add_head(spec, embedding.weight.detach())
        if projection_spec is not None:
            step.set_projection(projection_spec)
    except RuntimeError:
        return False
    return True


def gumbel_noise(
    wrapper: Any, bsz: int, vocab: int, generator: Any, uniforms: torch.Tensor | None
) -> torch.Tensor:
    """log(-log(u)) [groups - 1, B, vocab] float32 for a frame, u drawn as the stock loop draws.

    vLLM-Omni's `_sample_codes_gumbel` draws u [B, vocab] per code (one generator, or
    one per row in row order), so the draws here go code by code in that order.
    """
    steps = int(wrapper._num_groups) - 1
    if uniforms is not None:
        u = uniforms.transpose(0, 1)
    else:
        u = torch.empty(steps, bsz, vocab, dtype=torch.float32)
        rows = wrapper._normalize_generators(generator, bsz)
        for index in range(steps):
            if isinstance(rows, list):
                for row, row_generator in enumerate(rows):
                    u[index, row : row + 1].uniform_(
                        UNIFORM_EPS, 1.0 - UNIFORM_EPS, generator=row_generator
                    )
            else:
                u[index].uniform_(UNIFORM_EPS, 1.0 - UNIFORM_EPS, generator=rows)
    return torch.log(-torch.log(u)).contiguous()
