"""The GEMV runs on every thread of its stage, and on AMX tiles where the CPU has them.

Threads: column blocks are split over torch's OpenMP team; each output column is
still summed by one thread in one order, so 1 and 2 threads give the same bits.
AMX: the same packed weights through the tile unit. bf16 sums in another order
(within bf16 rounding of float32); int8 sums are exact integers, so AMX and the
AVX-512 path give the same bits.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("vllm", reason="the inference runtime is not installed")

import torch

from omni_cpu import envs
from omni_cpu.kernels import gemv
from tests.helpers import tensors
from tests.helpers.tensors import relative

pytestmark = [pytest.mark.core_model, pytest.mark.cpu]
needs_gemv = pytest.mark.skipif(
    not gemv.cpu_supports(), reason="this CPU lacks avx512_bf16/avx512_vnni"
)
needs_amx = pytest.mark.skipif(
    not (gemv.cpu_supports() and gemv.amx_supported()),
    reason="this CPU has no AMX (amx_tile/amx_bf16/amx_int8)",
)


@pytest.fixture
def two_threads() -> Iterator[None]:
    saved = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(saved)


def weight(out_features: int, in_features: int, seed: int = 0) -> torch.Tensor:
    return tensors.weight(out_features, in_features, seed, std=0.05)


def packed(w: torch.Tensor, weights: str) -> gemv.PackedBf16Weights | gemv.PackedInt8Weights:
    module = gemv.kernel()
    if weights == "bf16":
        return gemv.PackedBf16Weights(w.to(torch.bfloat16), module)
    return gemv.PackedInt8Weights(w, module)


@needs_gemv
def test_one_parallel_region_reaches_every_thread_of_the_stage(two_threads: None) -> None:
    # Built without -fopenmp, at::parallel_for runs serially and this is 1.
    assert gemv.kernel().parallel_threads(64) == 2


@needs_gemv
@pytest.mark.parametrize("weights", ["bf16", "int8"])
@pytest.mark.parametrize("rows", [1, 4, 33], ids=lambda r: f"M{r}")
def test_two_threads_give_the_one_thread_result(weights: str, rows: int) -> None:
    product = packed(weight(1024 + 48, 256), weights)
    product.amx_rows = 0
    x = torch.randn(rows, 256).to(torch.bfloat16)
    saved = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = product(x)
        torch.set_num_threads(2)
        two = product(x)
    finally:
        torch.set_num_threads(saved)
    assert torch.equal(one, two)


# Rows: whole tiles of 16 (16, 32, 64), a remainder (17, 33) and fewer than a tile
# (1, 8); two row tiles are one piece, so 33 and 64 take several. Columns: blocks of
# 64 in pieces of 32, so 208 ends in one 16-wide tile and 48 is three tiles.
@needs_amx
@pytest.mark.parametrize("rows", [1, 8, 16, 17, 33, 64], ids=lambda r: f"M{r}")
@pytest.mark.parametrize("columns", [256, 208, 48], ids=lambda n: f"N{n}")
def test_amx_bf16_matches_float32(rows: int, columns: int, two_threads: None) -> None:
    w, bias = weight(columns, 192), torch.randn(columns)
    product = packed(w, "bf16")
    product.amx_rows = 1
    x = torch.randn(rows, 192)
    got = product(x.to(torch.bfloat16), bias.to(torch.bfloat16))
    assert got.shape == (rows, columns) and got.dtype == torch.bfloat16
    assert relative(got, torch.nn.functional.linear(x, w, bias)) < 0.01


@needs_amx
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("rows", [1, 8, 17, 33], ids=lambda r: f"M{r}")
@pytest.mark.parametrize("columns", [512, 208], ids=lambda n: f"N{n}")
def test_amx_int8_gives_the_avx512_bits(rows: int, columns: int, dtype: torch.dtype) -> None:
    w, bias = weight(columns, 256), torch.randn(columns)
    product = packed(w.to(dtype), "int8")
    x = torch.randn(rows, 256).to(dtype)
    product.amx_rows = 0
    avx512 = product(x, bias.to(dtype))
    product.amx_rows = 1
    amx = product(x, bias.to(dtype))
    assert torch.equal(amx, avx512)
    assert relative(amx, torch.nn.functional.linear(x.float(), w, bias)) < 0.03


@needs_amx
def test_each_output_column_lands_in_its_own_place_on_amx() -> None:
    w, x, want = tensors.column_picking(rows=33)
    for weights in ("bf16", "int8"):
        product = packed(w, weights)
        product.amx_rows = 1
        got = product(x.to(torch.bfloat16)).float()
        assert torch.allclose(got, want, rtol=0.01, atol=0.5), weights


@needs_amx
def test_a_k_that_fills_no_whole_tile_row_stays_on_avx512() -> None:
    # bf16 tiles take K in steps of 32: K = 48 must not read past each row of x.
    w = weight(64, 48)
    product = packed(w, "bf16")
    product.amx_rows = 1
    x = torch.randn(20, 48)
    assert relative(product(x.to(torch.bfloat16)), x @ w.t()) < 0.01


@needs_gemv
def test_amx_rows_follow_the_knob(monkeypatch: pytest.MonkeyPatch) -> None:
    has_amx = gemv.amx_supported() and gemv.kernel().amx_ready()
    monkeypatch.setenv("OMNI_CPU_AMX_ROWS", "auto")
    assert gemv.amx_rows("bf16") == (gemv.AMX_ROWS["bf16"] if has_amx else 0)
    assert gemv.amx_rows("int8") == (gemv.AMX_ROWS["int8"] if has_amx else 0)
    monkeypatch.setenv("OMNI_CPU_AMX_ROWS", "bf16=2,int8=16")
    assert (gemv.amx_rows("bf16"), gemv.amx_rows("int8")) == ((2, 16) if has_amx else (0, 0))
    assert packed(weight(64, 64), "int8").amx_rows == (16 if has_amx else 0)
    monkeypatch.setenv("OMNI_CPU_AMX_ROWS", "0")
    assert gemv.amx_rows("bf16") == 0


@pytest.mark.parametrize("raw", ["many", "bf16=x", "bf16"])
def test_an_unreadable_amx_rows_value_names_what_it_takes(
    raw: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMNI_CPU_AMX_ROWS", raw)
    with pytest.raises(ValueError, match="use auto, a row count, or bf16=N,int8=N"):
        envs.OMNI_CPU_AMX_ROWS  # noqa: B018
