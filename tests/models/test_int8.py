"""Opt-in int8 weights: accuracy bound, what gets quantized, the vLLM load hook."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="the inference runtime is not installed")

import torch
from torch import nn

from omni_cpu.kernels import fbgemm
from omni_cpu.models import int8

pytestmark = [pytest.mark.core_model, pytest.mark.cpu]
needs_fbgemm = pytest.mark.skipif(not fbgemm.int8_supported(), reason="no FBGEMM engine here")


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).norm() / want.norm())


@needs_fbgemm
def test_int8_matmul_stays_within_a_few_percent_and_keeps_shape_and_bias() -> None:
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(512, 256, generator=generator) * 0.02
    bias = torch.randn(512, generator=generator)
    x = torch.randn(2, 3, 256, generator=generator)
    got = fbgemm.Int8Weights(weight)(x, bias)
    want = torch.nn.functional.linear(x, weight, bias)
    assert got.shape == (2, 3, 512)
    assert got.dtype == x.dtype
    # Measured 2.0 % per layer on random weights (module docstring); 4 % catches a
    # wrong scale or a dropped bias, which give errors near 100 %.
    assert relative_error(got, want) < 0.04


@needs_fbgemm
def test_quantize_linears_swaps_large_layers_and_leaves_small_ones() -> None:
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.ModuleList([nn.Linear(512, 16)]))
    x = torch.randn(4, 256)
    big_before = model[0](x)
    assert int8.quantize_linears(model) == 1
    assert isinstance(model[0], int8.Int8Linear)
    assert isinstance(model[2][0], nn.Linear)  # 16 outputs: below MIN_QUANTIZED_DIM
    assert relative_error(model[0](x), big_before) < 0.04
