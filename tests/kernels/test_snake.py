"""The codec's SnakeBeta in one pass (csrc/snake.cpp) computes the activation's formula.

y = x + inv_beta * sin(alpha * x)^2 per channel, time-major [B, L, C], written after a
carried tail. Checked in float64 against float32 inputs, in each module this CPU runs (the
AVX-512 one and the AVX2 one, 16 and 8 lanes): float32 to 2e-6 absolute on values of up to
~10 (a float32 ulp of the result is 1e-6 there; the sine's own error is under 1.2e-7), bf16
to the result's rounding (half a bf16 ulp, 2^-8 relative). The sine alone is checked over
|alpha x| <= 1e4, where its range reduction must hold. A wrong channel's alpha, a dropped
remainder channel or a misplaced tail gives errors of the signal's size.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("vllm", reason="the inference runtime is not installed")

import torch

from omni_cpu.kernels import build

pytestmark = [pytest.mark.core_model, pytest.mark.cpu]


@pytest.fixture(params=[build.AVX512, build.AVX2], ids=["avx512", "avx2"])
def module(request: pytest.FixtureRequest) -> Any:
    if not request.param.runs_here():
        pytest.skip(f"this CPU lacks {', '.join(sorted(request.param.isa - build.cpu_isa()))}")
    loaded = build.load(request.param)
    assert loaded is not None
    return loaded


def formula(x: torch.Tensor, alpha: torch.Tensor, inv_beta: torch.Tensor) -> torch.Tensor:
    x = x.double()
    product = (x.float() * alpha.float()).double()  # alpha * x as float32 rounds it
    return x + inv_beta.double() * torch.sin(product) ** 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("channels", [96, 20, 3])  # whole vectors; a remainder; fewer than one
@pytest.mark.parametrize("keep", [0, 6])
def test_snake_matches_its_formula_after_the_tail(module: Any, dtype, channels, keep) -> None:
    generator = torch.Generator().manual_seed(channels + keep)
    x = (torch.randn(2, 37, channels, generator=generator) * 3).to(dtype)
    alpha = torch.rand(channels, generator=generator) * 3 + 0.1
    inv_beta = torch.rand(channels, generator=generator) + 0.1
    tail = torch.randn(2, keep, channels, generator=generator).to(dtype) if keep else None
    got = module.snake_beta(x, alpha, inv_beta, tail)
    assert got.shape == (2, keep + 37, channels) and got.dtype == dtype
    if keep:
        assert torch.equal(got[:, :keep], tail)
    want = formula(x, alpha, inv_beta)
    error = (got[:, keep:].double() - want).abs()
    if dtype == torch.float32:
        assert error.max().item() < 2e-6
    else:
        assert (error <= want.abs() * 2**-8 + 1e-30).all()


def test_sine_holds_over_a_wide_range(module: Any) -> None:
    # x in [-1, 1] and alpha 1e4: the sine's argument spans [-1e4, 1e4]; inv_beta 1 and the
    # result less x leave sin^2 to within x's float32 rounding.
    x = torch.linspace(-1, 1, 200_003).view(1, -1, 1)
    alpha, inv_beta = torch.full((1,), 1e4), torch.ones(1)
    got = module.snake_beta(x, alpha, inv_beta, None).double() - x.double()
    want = torch.sin((x * alpha).double()) ** 2
    assert (got - want).abs().max().item() < 3e-7
