"""PyTorch's FBGEMM dynamic int8 product: the int8 kernel where omni-cpu's GEMV does not run.

Symmetric per-output-channel int8 weights packed once (`quantized::linear_prepack`),
activations quantized per call by `quantized::linear_dynamic` with `reduce_range`
(7-bit activations: FBGEMM's u8 x s8 pair sums saturate in 16 bits otherwise;
measured 2.0 % relative error per layer with it, 3.0 % without). omni_cpu.models.int8
says when the talker stage uses it; omni_cpu.kernels.timing times it against the GEMV.

Written against torch 2.13 (`quantized::linear_prepack`/`linear_dynamic`,
`torch.quantize_per_channel`, deprecated upstream but present).
"""

from __future__ import annotations

import warnings

import torch

_QUANTIZED_ENGINES = ("x86", "fbgemm")


def int8_supported() -> bool:
    """FBGEMM (x86) is the engine these kernels were measured with."""
    engines = torch.backends.quantized.supported_engines
    return any(engine in engines for engine in _QUANTIZED_ENGINES)


class Int8Weights:
    """One weight matrix packed for `quantized::linear_dynamic`."""

    def __init__(self, weight: torch.Tensor) -> None:
        w = weight.detach().to(torch.float32)
        scales = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-12).to(torch.float64)
        zero_points = torch.zeros(w.shape[0], dtype=torch.long)
        with warnings.catch_warnings():  # deprecated upstream (torch 2.13), still the API
            warnings.simplefilter("ignore", UserWarning)
            quantized = torch.quantize_per_channel(w, scales, zero_points, 0, torch.qint8)
        self.packed = torch.ops.quantized.linear_prepack(quantized, None)
        self.out_features = int(w.shape[0])

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1]).to(torch.float32)
        out = torch.ops.quantized.linear_dynamic(rows, self.packed, True)
        if bias is not None:
            out = out + bias
        return out.to(x.dtype).reshape(*x.shape[:-1], self.out_features)
