"""Each linear layer gets the fastest correct kernel for its weight format and this CPU.

On a CPU with avx512_bf16 and avx512_vnni, omni-cpu's GEMV takes bf16 and int8
weights (omni_cpu.kernels.gemv); elsewhere vLLM's oneDNN (bf16/float32) and
FBGEMM (int8). Each product is checked against float32 `F.linear` within the
rounding of its format: bf16 weights and activations 1 % (measured 0.3 %),
8-bit weights and activations 3 % (measured 1.1-1.2 %); a wrong layout, scale,
zero point or bias gives errors near 100 %.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="the inference runtime is not installed")

import torch
from torch import nn

from omni_cpu.kernels import fbgemm, gemv, packing, weight_cache
from omni_cpu.models import linears
from tests.helpers.tensors import column_picking

pytestmark = [pytest.mark.core_model, pytest.mark.cpu]
needs_gemv = pytest.mark.skipif(
    not gemv.cpu_supports(), reason="this CPU lacks avx512_bf16/avx512_vnni"
)


def relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float() - want.float()).norm() / want.float().norm())


def weight(out_features: int, in_features: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(out_features, in_features, generator=torch.Generator().manual_seed(seed))


# Rows: the kernel's register tiles hold 1-6 rows of x, so 6, 7 (6 + 1), 13 and 33
# (several tiles and a remainder) cover every tile height. Columns: blocks of 64,
# the last 16, 32 or 48 wide, so 256 is whole blocks and 208 / 112 / 48 end in a part.
@needs_gemv
@pytest.mark.parametrize("rows", [1, 3, 4, 6, 7, 13, 33], ids=lambda r: f"M{r}")
@pytest.mark.parametrize("columns", [256, 208, 112, 48], ids=lambda n: f"N{n}")
def test_bf16_gemv_matches_float32_for_decode_and_prefill_rows(rows: int, columns: int) -> None:
    w, bias = weight(columns, 192) * 0.05, torch.randn(columns)
    x = torch.randn(2, rows, 192)
    kernel, product = linears.choose(w.to(torch.bfloat16), "model")
    assert kernel == "gemv-bf16"
    got = product(x.to(torch.bfloat16), bias.to(torch.bfloat16))
    assert got.shape == (2, rows, columns) and got.dtype == torch.bfloat16
    assert relative(got, torch.nn.functional.linear(x, w, bias)) < 0.01


@needs_gemv
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("rows", [1, 5, 6, 13])
@pytest.mark.parametrize("columns", [512, 464], ids=lambda n: f"N{n}")
def test_w8a8_gemv_stays_within_int8_rounding(rows: int, columns: int, dtype: torch.dtype) -> None:
    w, bias = weight(columns, 256) * 0.02, torch.randn(columns)
    x = torch.randn(rows, 256)
    kernel, product = linears.choose(w.to(dtype), "int8")
    assert kernel == "gemv-w8a8"
    got = product(x.to(dtype), bias.to(dtype))
    assert got.dtype == dtype
    assert relative(got, torch.nn.functional.linear(x, w, bias)) < 0.03


@needs_gemv
def test_quantizing_leaves_the_float_weight_as_it_was() -> None:
    # Quantized in slices of QUANTIZE_ROWS, in place on float32 copies, never on the weight.
    w = weight(2 * packing.QUANTIZE_ROWS + 64, 128) * 0.02
    kept = w.clone()
    linears.choose(w, "int8")
    assert torch.equal(w, kept)


@needs_gemv
def test_each_output_column_lands_in_its_own_place() -> None:
    """A permuted layout can keep the norm of the error small only by luck; check columns."""
    w, x, want = column_picking(rows=3)
    for weights, dtype in (("model", torch.bfloat16), ("int8", torch.float32)):
        got = linears.choose(w.to(dtype), weights)[1](x.to(dtype)).float()
        assert torch.allclose(got, want, rtol=0.01, atol=0.5), weights


@needs_gemv
def test_w8a8_is_more_accurate_than_fbgemm_dynamic_int8() -> None:
    w, x = weight(512, 256) * 0.02, torch.randn(8, 256)
    want = torch.nn.functional.linear(x, w)
    ours = linears.choose(w, "int8")[1](x)
    library = fbgemm.Int8Weights(w)(x)
    assert relative(ours, want) < relative(library, want)


def test_shapes_the_gemv_cannot_take_go_to_onednn_or_stay() -> None:
    odd = weight(250, 192).to(torch.bfloat16)  # N not a multiple of 16
    chosen = linears.choose(odd, "model")
    assert chosen is None or chosen[0] == "onednn"
    assert linears.choose(weight(64, 64).double(), "model") is None
    assert linears.choose(weight(64, 64), "int8") is None  # below MIN_QUANTIZED_DIM


def test_route_linears_swaps_modules_and_keeps_their_output() -> None:
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256, bias=False))
    model = model.to(torch.bfloat16)
    x = torch.randn(3, 256, dtype=torch.bfloat16)
    with torch.no_grad():
        before = model(x)
        counts = linears.route_linears(model, "model")
        after = model(x)
    assert sum(counts.values()) == 2
    assert linears.summary(model) == counts
    assert relative(after, before) < 0.02


class FakeVllmLinear(nn.Module):
    """What vLLM's CPU dispatch sees: a module holding a 2-D `weight` parameter."""

    def __init__(self, out_features: int, in_features: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight(out_features, in_features).to(dtype) * 0.02, False)


@pytest.mark.parametrize("weights", ["model", "int8"])
def test_vllm_load_hook_routes_then_restores_vllm_dispatch(weights: str) -> None:
    from vllm.model_executor.layers import utils as layer_utils

    stock = layer_utils.dispatch_cpu_unquantized_gemm
    big = FakeVllmLinear(384, 256, torch.bfloat16)
    kept = FakeVllmLinear(384, 256, torch.bfloat16)
    x = torch.randn(1, 256, dtype=torch.bfloat16)
    want = torch.nn.functional.linear(x.float(), big.weight.float())
    counts: Counter[str] = Counter()
    with linears.vllm_linears(weights, counts):
        layer_utils.dispatch_cpu_unquantized_gemm(big, remove_weight=True)
        # Layers that keep their weight (embeddings doubling as heads) go to vLLM.
        layer_utils.dispatch_cpu_unquantized_gemm(kept, remove_weight=False)
    assert layer_utils.dispatch_cpu_unquantized_gemm is stock
    assert kept.weight.numel() == 384 * 256
    assert relative(big.cpu_linear(x, big.weight, None), want) < 0.04
    if weights == "int8" or gemv.cpu_supports():
        assert sum(counts.values()) == 1
        assert big.weight.numel() == 0  # one copy of the weights in memory


def test_describe_names_each_kernel_once() -> None:
    line = linears.describe("int8", Counter({"gemv-w8a8": 3}), Counter({"onednn": 1}))
    assert line == "linear kernels (int8 weights): talker 3 gemv-w8a8; predictor 1 onednn"


needs_any_gemv = pytest.mark.skipif(
    gemv.kernel() is None and gemv.avx2_kernel() is None, reason="no omni-cpu GEMV on this CPU"
)


def _cache_entry(tmp_path, weights: str) -> tuple[Path, weight_cache.EntryKey]:
    from safetensors.torch import save_file

    tmp_path.joinpath("ckpt").mkdir(exist_ok=True)
    checkpoint = tmp_path / "ckpt" / "model.safetensors"
    save_file({"w": torch.zeros(4)}, str(checkpoint))
    entry = weight_cache.entry_key([checkpoint], build="torch-test-0", parts={"weights": weights})
    return tmp_path / "cache", entry


def _mlp() -> nn.Module:
    """The same two-layer bf16 MLP at each call (seed 0): a model and its twin for the cache."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256)).to(torch.bfloat16)


def _assert_same_products(served: nn.Module, reference: nn.Module) -> None:
    """`served` (its layers mapped from the cache) gives `reference`'s output to the bit."""
    x = torch.randn(3, 256, dtype=torch.bfloat16)
    with torch.no_grad():
        assert torch.equal(served(x), reference(x))


@needs_any_gemv
@pytest.mark.parametrize("weights", ["model", "int8", "int4"])
def test_a_second_load_maps_every_layer_from_the_cache_and_multiplies_the_same(
    tmp_path, weights: str
) -> None:
    root, entry = _cache_entry(tmp_path, weights)
    first, second = _mlp(), _mlp()
    packing = linears.Packing(weight_cache.WeightCache.open(root, entry))
    first_kernels = linears.route_linears(first, weights, packing, "code_predictor")
    assert (packing.status, packing.packed, packing.cached) == ("miss", 2, 0)
    assert packing.save() is not None

    again = linears.Packing(weight_cache.WeightCache.open(root, entry))
    assert linears.route_linears(second, weights, again, "code_predictor") == first_kernels
    assert (again.status, again.packed, again.cached) == ("hit", 0, 2)
    assert again.save() is None  # nothing new to write
    _assert_same_products(second, first)


@needs_any_gemv
def test_a_hit_copies_nothing_from_the_checkpoint_into_the_layers_it_serves(tmp_path) -> None:
    root, entry = _cache_entry(tmp_path, "int8")
    first = _mlp()
    writing = linears.Packing(weight_cache.WeightCache.open(root, entry))
    linears.route_linears(first, "int8", writing)
    writing.save()

    second = _mlp()
    packing = linears.Packing(weight_cache.WeightCache.open(root, entry))
    assert packing.skip_cached_loads(second, "int8") == 2
    placeholder = second[0].weight
    assert placeholder.shape == (512, 256) and placeholder.untyped_storage().nbytes() == 2
    placeholder.weight_loader(placeholder, torch.ones(512, 256))  # what a loader calls: no copy
    linears.route_linears(second, "int8", packing)
    packing.check_served()
    _assert_same_products(second, first)


@needs_any_gemv
def test_a_layer_skipped_at_load_but_never_served_is_an_error(tmp_path) -> None:
    root, entry = _cache_entry(tmp_path, "int8")
    writing = linears.Packing(weight_cache.WeightCache.open(root, entry))
    linears.route_linears(nn.Sequential(nn.Linear(256, 512)), "int8", writing)
    writing.save()
    packing = linears.Packing(weight_cache.WeightCache.open(root, entry))
    assert packing.skip_cached_loads(nn.Sequential(nn.Linear(256, 512)), "int8") == 1
    with pytest.raises(RuntimeError, match="never served"):
        packing.check_served()
