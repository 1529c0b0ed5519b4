"""Opt-in int8 weights for the talker stage: `OMNI_CPU_WEIGHTS=int8`.

Why: at batch 1 every talker step streams all of the talker's and, 15 times,
the code predictor's weights from memory. In float32 on the 2-core AVX2 EPYC
that is about 6.5 GB per 80 ms audio frame against ~16 GB/s, so float32 cannot
run faster than RTF ≈ 5 there, whatever the code does. int8 weights move a
quarter of the bytes. CPUs without avx512_bf16/AMX have no fast bf16 path
(bf16 GEMV measured no faster than float32 on that box), so int8 is the lever.

How: symmetric per-output-channel int8 weights, activations quantized per call
(dynamic, per row batch) by PyTorch's FBGEMM kernels (`quantized::linear_dynamic`,
omni_cpu.kernels.fbgemm), which are vectorised for AVX2 and AVX-512. `reduce_range`
keeps activations to 7 bits because FBGEMM's u8×s8 pair sums saturate in 16 bits otherwise: the
measured relative error per layer was 2.0 % with it and 3.0 % without.
Weight-only int8 (`torch._weight_int8pack_mm`) was more accurate (0.9 %) but
14× slower than float32 on AVX2, so it is not used.

Where the CPU has AVX-512 VNNI, omni-cpu's own W8A8 GEMV (omni_cpu.kernels.gemv)
is faster and more accurate (8-bit activations, 32-bit sums) and takes these
layers instead; omni_cpu.models.linears chooses. FBGEMM stays the int8 path on
other x86 CPUs (AVX2).

Trade-off, stated plainly: the audio changes. Random-weight checkpoints cannot
tell whether real Qwen3-TTS voices stay as good; listen before you deploy it.
The default is the checkpoint's own dtype.

Written against torch 2.13 (`quantized::linear_prepack`/`linear_dynamic`,
`torch.quantize_per_channel`, deprecated upstream but present).
"""

from __future__ import annotations

import torch
from torch import nn

from omni_cpu.kernels.fbgemm import Int8Weights

# Smaller matrices (routers, gates) gain nothing and lose precision; 128 keeps
# the tiny test checkpoint's layers in, so the tests exercise this path.
MIN_QUANTIZED_DIM = 128


class Int8Linear(nn.Module):
    """Drop-in for an `nn.Linear` (weights quantized once, at load)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.weights = Int8Weights(linear.weight)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weights(x, self.bias)


def worth_quantizing(weight: torch.Tensor) -> bool:
    return (
        weight.ndim == 2
        and weight.is_floating_point()
        and not weight.is_meta
        and min(weight.shape) >= MIN_QUANTIZED_DIM
    )


def quantize_linears(module: nn.Module) -> int:
    """Replace every large `nn.Linear` under `module` with `Int8Linear`; how many."""
    count = 0
    for name, child in list(module.named_children()):
        if isinstance(child, nn.Linear) and worth_quantizing(child.weight):
            setattr(module, name, Int8Linear(child))
            count += 1
        else:
            count += quantize_linears(child)
    return count
