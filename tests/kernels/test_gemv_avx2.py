"""The GEMV's AVX2 modules (csrc/gemv_avx2_*.cpp), run here whatever the CPU's AVX-512.

Two compiles of the same sources: plain AVX2 (vpmaddubsw) and AVX-VNNI (vpdpbusd), the
second only run where the CPU states avx_vnni but compiled everywhere.

It takes the same packed weights as the AVX-512 build. bf16 weights with float32
arithmetic: bound 1 % (measured 0.2-0.3 %, the bf16 rounding of the weights); int8
W8A8 with the |w| / sign trick: bound 3 % (measured 0.3-0.9 %). A saturating pair
sum (plain u8 x s8 vpmaddubsw) or a wrong half-block gives errors of tens of percent.
"""

from __future__ import annotations

import functools
from collections import Counter
from typing import Any

import pytest

pytest.importorskip("vllm", reason="the inference runtime is not installed")

import torch
from torch import nn

from omni_cpu import envs
from omni_cpu.kernels import build, gemv, packing
from omni_cpu.models import linears
from tests.helpers.attention import one_position_case
from tests.helpers.tensors import relative, weight

pytestmark = [pytest.mark.core_model, pytest.mark.cpu]
needs_avx2 = pytest.mark.skipif(not gemv.avx2_cpu_supports(), reason="this CPU lacks AVX2")
REAL_SHAPES = [(4096, 1024), (1024, 2048), (6144, 1024), (1024, 3072), (1024, 1024)]


@functools.cache
def packed(n: int, k: int) -> tuple[torch.Tensor, gemv.PackedBf16Weights, gemv.PackedInt8Weights]:
    w, module = weight(n, k), gemv.avx2_kernel()
    return (
        w,
        gemv.PackedBf16Weights(w.to(torch.bfloat16), module),
        gemv.PackedInt8Weights(w, module),
    )


@needs_avx2
@pytest.mark.parametrize("rows", [1, 3, 7, 33], ids=lambda r: f"M{r}")
@pytest.mark.parametrize("shape", REAL_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_avx2_gemv_on_the_real_shapes(shape: tuple[int, int], rows: int) -> None:
    w, bf16, w8a8 = packed(*shape)
    x = torch.randn(rows, shape[1], generator=torch.Generator().manual_seed(rows))
    want = x @ w.t()
    got = bf16(x.to(torch.bfloat16))
    assert got.dtype == torch.bfloat16 and got.shape == (rows, shape[0])
    assert relative(got, want) < 0.01
    assert relative(w8a8(x), want) < 0.03


@needs_avx2
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("rows", [1, 2, 3, 6], ids=lambda r: f"M{r}")
@pytest.mark.parametrize("columns", [16, 48, 208, 256], ids=lambda n: f"N{n}")
def test_avx2_gemv_on_partial_blocks_with_bias(columns: int, rows: int, dtype: torch.dtype) -> None:
    w, bias = weight(columns, 192, seed=columns), torch.randn(columns) * 0.1
    x = torch.randn(2, rows, 192, generator=torch.Generator().manual_seed(rows))
    want = torch.nn.functional.linear(x, w, bias)
    module = gemv.avx2_kernel()
    bf16 = gemv.PackedBf16Weights(w.to(torch.bfloat16), module)(x.to(dtype), bias.to(dtype))
    w8a8 = gemv.PackedInt8Weights(w, module)(x.to(dtype), bias.to(dtype))
    assert bf16.shape == w8a8.shape == (2, rows, columns)
    assert w8a8.dtype == dtype
    assert relative(bf16, want) < 0.01
    assert relative(w8a8, want) < 0.03


@pytest.fixture(params=[build.AVX2, build.AVX2_VNNI], ids=["vpmaddubsw", "avx-vnni"])
def avx2_module(request: pytest.FixtureRequest) -> Any:
    """Each AVX2 module in turn: the AVX-VNNI one only where the CPU has it."""
    if not request.param.runs_here():
        pytest.skip(f"this CPU lacks {', '.join(sorted(request.param.isa - build.cpu_isa()))}")
    module = build.load(request.param)
    assert module is not None and module.avx_vnni() == (request.param is build.AVX2_VNNI)
    return module


@needs_avx2
def test_the_avx_vnni_module_compiles_on_any_avx2_cpu() -> None:
    """Built (and imported, which runs no vpdpbusd) even where the CPU cannot run it."""
    module = build.load(build.AVX2_VNNI)
    assert module is not None and module.avx_vnni()


@needs_avx2
@pytest.mark.parametrize("rows", [1, 3], ids=lambda r: f"M{r}")
def test_both_avx2_tiles_match_float32(avx2_module: Any, rows: int) -> None:
    w, x = weight(208, 1024), torch.randn(rows, 1024)
    got = gemv.PackedInt8Weights(w, avx2_module)(x)
    assert relative(got, x @ w.t()) < 0.03


@needs_avx2
@pytest.mark.parametrize("rows", [1, 2, 7], ids=lambda r: f"M{r}")
def test_both_int4_tiles_match_the_dequantized_product(avx2_module: Any, rows: int) -> None:
    w, x = weight(208, 1024), torch.randn(rows, 1024)
    n, k = w.shape
    codes, scale, low = packing.quantize_int4(w.reshape(n, k // 32, 32))
    dequantized = (codes.float() * scale[..., None] + low[..., None]).reshape(n, k)
    got = gemv.PackedInt4Weights(w, avx2_module)(x)
    assert relative(got, x @ dequantized.t()) < 0.015


@needs_avx2
def test_avx2_w8a8_does_not_saturate_on_extreme_codes(avx2_module: Any) -> None:
    """All weights and activations at +-127: a u8 x s8 pair sum of 2 x 127 x 255 would clip."""
    w = torch.full((64, 256), 1.0)
    w[:, 1::2] = -1.0
    x = torch.ones(1, 256)
    x[:, 1::2] = -1.0  # every product is +1: y = 256
    got = gemv.PackedInt8Weights(w, avx2_module)(x)
    assert torch.allclose(got, torch.full((1, 64), 256.0), rtol=1e-4)


@needs_avx2
def test_each_avx2_output_column_lands_in_its_own_place() -> None:
    w = torch.zeros(208, 192)
    w[torch.arange(208), (torch.arange(208) * 5) % 192] = 1.0
    x = torch.arange(3 * 192, dtype=torch.float32).reshape(3, 192) % 97
    want = x[:, (torch.arange(208) * 5) % 192]
    module = gemv.avx2_kernel()
    for product, dtype in (
        (gemv.PackedBf16Weights(w.to(torch.bfloat16), module), torch.bfloat16),
        (gemv.PackedInt8Weights(w, module), torch.float32),
    ):
        assert torch.allclose(product(x.to(dtype)).float(), want, rtol=0.01, atol=0.5), dtype


@needs_avx2
def test_forcing_avx2_routes_bf16_and_int8_to_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(envs.GEMV.name, "avx2")
    assert gemv.kernel() is None  # the AVX-512 build and its attention step aside
    assert linears.choose(weight(384, 256).to(torch.bfloat16), "model")[0] == "gemv-avx2-bf16"
    assert linears.choose(weight(384, 256), "int8")[0] == "gemv-avx2-w8a8"
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256)).to(torch.bfloat16)
    x = torch.randn(3, 256, dtype=torch.bfloat16)
    with torch.no_grad():
        before = model(x)
        assert linears.route_linears(model, "model") == Counter({"gemv-avx2-bf16": 2})
        assert relative(model(x), before) < 0.02


@needs_avx2
@pytest.mark.parametrize("dtype,tolerance", [(torch.float32, 1e-5), (torch.bfloat16, 0.01)])
@pytest.mark.parametrize("bsz,heads,groups", [(1, 16, 8), (2, 6, 2)])
@pytest.mark.parametrize("end", [1, 9, 17])
def test_the_avx2_one_position_attention_matches_sdpa(
    dtype: torch.dtype,
    tolerance: float,
    bsz: int,
    heads: int,
    groups: int,
    end: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The bounds of test_decode_attention.py, on the AVX2 module's copy of the kernel."""
    monkeypatch.setenv(envs.GEMV.name, "avx2")
    case = one_position_case(dtype, bsz, heads, groups, end)
    got = gemv.decode_attention(case.q, case.keys, case.values, end, case.scale)
    assert got.dtype == dtype and got.shape == case.q.shape
    assert relative(got, case.want()) < tolerance
