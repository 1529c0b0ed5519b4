"""Opt-in int8 weights: accuracy bound, what gets quantized, the vLLM load hook."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="the inference runtime is not installed")

import torch
from torch import nn

from omni_cpu.platform import int8

pytestmark = [pytest.mark.core_model, pytest.mark.cpu]
needs_fbgemm = pytest.mark.skipif(not int8.int8_supported(), reason="no FBGEMM engine here")


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).norm() / want.norm())


@needs_fbgemm
def test_int8_matmul_stays_within_a_few_percent_and_keeps_shape_and_bias() -> None:
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(512, 256, generator=generator) * 0.02
    bias = torch.randn(512, generator=generator)
    x = torch.randn(2, 3, 256, generator=generator)
    got = int8.Int8Weights(weight)(x, bias)
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


def test_weights_choice_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(int8.WEIGHTS_ENV, raising=False)
    assert int8.requested_weights() == "model"
    monkeypatch.setenv(int8.WEIGHTS_ENV, "INT8")
    assert int8.requested_weights() == "int8"
    monkeypatch.setenv(int8.WEIGHTS_ENV, "int4")
    with pytest.raises(ValueError, match="model, int8"):
        int8.requested_weights()


class FakeVllmLinear(nn.Module):
    """What vLLM's CPU dispatch sees: a module holding a 2-D `weight` parameter."""

    def __init__(self, out_features: int, in_features: int) -> None:
        super().__init__()
        weight = torch.randn(out_features, in_features) * 0.02
        self.weight = nn.Parameter(weight, requires_grad=False)


@needs_fbgemm
def test_vllm_load_hook_packs_int8_then_restores_vllm_dispatch() -> None:
    from vllm.model_executor.layers import utils as layer_utils

    stock = layer_utils.dispatch_cpu_unquantized_gemm
    big, kept = FakeVllmLinear(384, 256), FakeVllmLinear(384, 256)
    x = torch.randn(1, 256)
    want = torch.nn.functional.linear(x, big.weight)
    counter = [0]
    with int8.int8_vllm_linears(counter):
        layer_utils.dispatch_cpu_unquantized_gemm(big, remove_weight=True)
        # Layers that keep their weight (embeddings doubling as heads) go to vLLM.
        layer_utils.dispatch_cpu_unquantized_gemm(kept, remove_weight=False)
    assert layer_utils.dispatch_cpu_unquantized_gemm is stock
    assert counter == [1]
    assert big.weight.numel() == 0
    assert relative_error(big.cpu_linear(x, big.weight, None), want) < 0.04
    assert kept.weight.numel() == 384 * 256
