"""The talker's norms on vLLM's fused CPU kernels compute what vLLM's own do.

omni_cpu.models.norms swaps `torch.ops._C` kernels into vLLM's RMSNorm
modules. Against the modules' own (native) path: float32 within
1e-5 relative (the same arithmetic, another summation order); bf16 within 1 %
(the native path rounds twice, the kernel once; one bf16 rounding is 0.4 %). A
wrong weight, residual or layout gives errors of order 1.
"""

from __future__ import annotations

import copy

import pytest

pytest.importorskip("vllm", reason="the inference runtime is not installed")

import torch
from torch import nn

from omni_cpu.models import norms
from tests.helpers.tensors import relative

pytestmark = [pytest.mark.core_model, pytest.mark.cpu]
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 0.01}


@pytest.fixture(autouse=True)
def vllm_config():
    """vLLM's CustomOps read the current config when they are built (and CpuPlatform's)."""
    from vllm.config import VllmConfig, set_current_vllm_config

    with set_current_vllm_config(VllmConfig()):
        yield


def norm(width: int, dtype: torch.dtype) -> nn.Module:
    from vllm.model_executor.layers.layernorm import RMSNorm

    module = RMSNorm(width, eps=1e-6)
    with torch.no_grad():
        generator = torch.Generator().manual_seed(1)
        module.weight.copy_(1 + 0.1 * torch.randn(width, generator=generator))
    return module.to(dtype)


def patched(module: nn.Module) -> nn.Module:
    twin = copy.deepcopy(module)
    assert sum(norms.install(twin).values()) == 1
    return twin


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_norm_matches_vllm_rms_norm(dtype: torch.dtype) -> None:
    stock = norm(256, dtype)
    x = (3 * torch.randn(5, 256)).to(dtype)
    assert relative(patched(stock)(x), stock(x)) < TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_norm_of_per_head_views_matches(dtype: torch.dtype) -> None:
    # The q/k norms see a strided view of the qkv output: [tokens, heads, head_dim].
    stock = norm(64, dtype)
    qkv = torch.randn(3, 4 * 64 + 100).to(dtype)
    q = qkv[:, : 4 * 64].view(3, 4, 64)
    got = patched(stock)(q)
    assert got.shape == q.shape
    assert relative(got, stock(q)) < TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_residual_norm_returns_the_norm_and_the_new_residual(dtype: torch.dtype) -> None:
    stock = norm(256, dtype)
    x, residual = torch.randn(4, 256).to(dtype), torch.randn(4, 256).to(dtype)
    want_out, want_residual = stock(x.clone(), residual.clone())
    got_out, got_residual = patched(stock)(x.clone(), residual.clone())
    assert relative(got_residual, want_residual) < TOLERANCE[dtype]
    assert relative(got_out, want_out) < TOLERANCE[dtype]


def test_calls_the_kernels_cannot_take_keep_the_modules_own_path() -> None:
    stock = norm(64, torch.float32)
    x = torch.randn(2, 64, dtype=torch.float64)
    assert torch.equal(patched(stock)(x), stock(x))  # float64: not the kernel's


def test_install_counts_what_it_swapped_and_skips_the_rest() -> None:
    from vllm.model_executor.layers.activation import SiluAndMul
    from vllm.model_executor.layers.layernorm import RMSNorm

    model = nn.Sequential(norm(32, torch.float32), RMSNorm(32, has_weight=False), SiluAndMul())
    assert norms.install(model) == {"rms_norm": 1}
