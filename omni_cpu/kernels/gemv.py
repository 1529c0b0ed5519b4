"""The GEMV modules' Python face: which module runs here, and the packed weights that call it.

Why: at batch 1 every talker-stage step is a chain of matrix-vector products, so its speed
is the rate at which weights come out of DRAM; a prefill and batched streams multiply the
same weights by more rows, so there the speed is the multiply-add rate. omni-cpu's GEMV
(csrc/, built by omni_cpu.kernels.build, laid out by omni_cpu.kernels.packing) streams
the weights at memory speed and keeps a few rows at the cost of one; vLLM's oneDNN and
FBGEMM, the fallbacks, do not (benchmarks/RESULTS.md, "The GEMV: output columns in the
lanes" and "int4 weights and the AVX2 GEMV", has the figures).

Which module: the AVX-512 one where the CPU states avx512_bf16 and avx512_vnni, else the
AVX2 one (its AVX-VNNI compile where the CPU states avx_vnni), else none and every caller
falls back to oneDNN (bf16/float32) and FBGEMM (int8); `OMNI_CPU_GEMV=off` forces the
fallbacks, `OMNI_CPU_GEMV=avx2` the AVX2 module on an AVX-512 CPU (tests, benchmarks).
Without AVX2 the plan and the runner refuse int4.

Threads: a call splits its column blocks over the stage's OpenMP team (`at::parallel_for`).
AMX: where the CPU has AMX tiles and Linux grants the process their state (arch_prctl
ARCH_REQ_XCOMP_PERM, kernel 5.16+), products of `amx_rows` rows or more (a prefill, a batch
of streams) run on them from the same packed blocks.

W8A8 sums in 32 bits (no 16-bit saturation, so unlike FBGEMM no reduce_range); W4A8 keeps
a scale and minimum per group of 32 (PackedInt4Weights).
"""

from __future__ import annotations

from typing import Any

import torch

from omni_cpu.kernels import build, packing

# Rows from which a product takes AMX tiles where the CPU has them, unless the profile says
# otherwise (`probe --calibrate` measures it per machine): in bf16 AMX beats the AVX-512 tiles
# from 2 rows, in int8 the AVX-512 W8A8 tiles stay ahead up to ~8 (benchmarks/RESULTS.md,
# "every core and the matrix units").
AMX_ROWS = {"bf16": 2, "int8": 16}


def cpu_supports() -> bool:
    """The AVX-512 module's ISA: avx512_bf16 and avx512_vnni (omni_cpu.kernels.build)."""
    return build.AVX512.runs_here()


def avx2_cpu_supports() -> bool:
    """The AVX2 module's ISA: AVX2, FMA and F16C."""
    return build.AVX2.runs_here()


def amx_supported() -> bool:
    """AMX tiles (every AMX CPU so far has amx_bf16 and amx_int8 with amx_tile)."""
    return "amx_tile" in build.cpu_isa()


def kernel() -> Any | None:
    """The AVX-512 module where it is the one chosen here (CPU, `OMNI_CPU_GEMV`), else None."""
    return build.load(build.AVX512) if build.chosen() is build.AVX512 else None


def avx2_kernel() -> Any | None:
    """The AVX2 module for this CPU (same packed layout and call signatures), or None; on
    aarch64 the best NEON module, which has the same calls.

    The linears ask for it where `kernel()` is None; the tests run it on AVX-512 CPUs too.
    """
    from omni_cpu import envs
    from omni_cpu.profile import choices

    if choices.value(envs.GEMV) == "off":
        return None
    arm = build.chosen()
    if arm in build.ARM_BUILDS:  # the NEON modules take the AVX2 modules' calls and layout
        return build.load(arm)
    avx2 = build.avx2_build()
    if not avx2.runs_here():
        return None
    return build.load(avx2)


def build_name() -> str | None:
    """The build folder's name of the module the linears use here, or None.

    It is the hash of that module's sources, headers and flags and of the torch it was built
    against, so it names the kernel build in the packed-weight cache's key
    (omni_cpu.kernels.weight_cache). Asks for the module (built once per process).
    """
    chosen = build.chosen()
    if chosen is None or build.load(chosen) is None:
        return None
    return build.cache_dir(chosen).name


def amx_rows(weights: str) -> int:
    """Rows from which a `weights` ("bf16" or "int8") product takes AMX tiles; 0 = never.

    The talker's `amx_rows` choice (its profile entry: what `probe --calibrate` measured);
    "auto" is AMX_ROWS where the CPU has AMX and Linux granted this process its state (the
    module's `amx_ready`: no ISA flag can say that).
    """
    from omni_cpu import envs
    from omni_cpu.profile import choices

    module = kernel()
    if module is None or not amx_supported() or not module.amx_ready():
        return 0
    chosen = choices.value(envs.AMX_ROWS) or {}
    return max(0, chosen.get(weights, AMX_ROWS.get(weights, 0)))


class PackedWeights:
    """What every packed weight shares: its state is `tensors()`, rebuilt by `from_tensors`.

    So a packed weight can be stored and mapped back without packing again
    (omni_cpu.kernels.weight_cache).
    """

    # K elements the layout packs together: a weight's K must be a multiple (packing.fits).
    k_group = 1

    @staticmethod
    def stored(n: int, k: int) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        raise NotImplementedError

    def _attach(self, tensors: dict[str, torch.Tensor], module: Any) -> None:
        raise NotImplementedError

    def tensors(self) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    @classmethod
    def from_tensors(
        cls, tensors: dict[str, torch.Tensor], module: Any, n: int, k: int
    ) -> PackedWeights:
        """The packed [n, k] weight from its stored tensors, packing nothing.

        Raises ValueError when they are not the tensors `stored(n, k)` names (a cache
        entry from another layout): the caller packs the weight instead.
        """
        expected = cls.stored(n, k)
        found = {name: (tuple(t.shape), t.dtype) for name, t in tensors.items()}
        if found != expected:
            raise ValueError(f"{cls.__name__} [{n}, {k}]: stored {found}, expected {expected}")
        packed = cls.__new__(cls)
        packed._attach(tensors, module)
        return packed


class PackedBf16Weights(PackedWeights):
    """A bf16 [N, K] weight in the kernel's layout; call with x [..., K] in bf16."""

    k_group = packing.BF16_GROUP

    def __init__(self, weight: torch.Tensor, module: Any) -> None:
        self._attach(packing.pack_bf16(weight), module)

    @staticmethod
    def stored(n: int, k: int) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """The tensors of an [n, k] weight: name -> (shape, dtype)."""
        return {"packed": ((n, k), torch.bfloat16)}

    def _attach(self, tensors: dict[str, torch.Tensor], module: Any) -> None:
        self.packed = tensors["packed"]
        self.out_features = int(self.packed.shape[0])
        self._gemv = module.gemv_bf16
        self._tiles = hasattr(module, "amx_ready")  # the AVX-512 module takes amx_rows
        self.amx_rows = amx_rows("bf16") if self._tiles else 0

    def tensors(self) -> dict[str, torch.Tensor]:
        return {"packed": self.packed}

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        if rows.dtype != torch.bfloat16 or not rows.is_contiguous():
            rows = rows.to(torch.bfloat16).contiguous()
        out = self._gemv(rows, self.packed, bias, *((self.amx_rows,) if self._tiles else ()))
        out = out if out.dtype == x.dtype else out.to(x.dtype)
        return out.reshape(*x.shape[:-1], self.out_features)


class PackedInt8Weights(PackedWeights):
    """Per-row symmetric int8 of a [N, K] weight in the kernel's layout (W8A8)."""

    k_group = packing.INT8_GROUP

    def __init__(self, weight: torch.Tensor, module: Any) -> None:
        self._attach(packing.pack_int8(weight), module)

    @staticmethod
    def stored(n: int, k: int) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """The tensors of an [n, k] weight: name -> (shape, dtype)."""
        return {
            "packed": ((n, k), torch.int8),
            "scales": ((n,), torch.float32),
            "row_sums": ((n,), torch.int32),
        }

    def _attach(self, tensors: dict[str, torch.Tensor], module: Any) -> None:
        self.packed = tensors["packed"]
        self.scales = tensors["scales"]
        self.row_sums = tensors["row_sums"]
        self.out_features = int(self.packed.shape[0])
        self._gemv = module.gemv_w8a8
        self._tiles = hasattr(module, "amx_ready")  # the AVX-512 module takes amx_rows
        self.amx_rows = amx_rows("int8") if self._tiles else 0

    def tensors(self) -> dict[str, torch.Tensor]:
        return {"packed": self.packed, "scales": self.scales, "row_sums": self.row_sums}

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        if rows.dtype not in (torch.bfloat16, torch.float32) or not rows.is_contiguous():
            rows = rows.to(torch.float32).contiguous()
        amx = (self.amx_rows,) if self._tiles else ()
        out = self._gemv(rows, self.packed, self.scales, self.row_sums, bias, *amx)
        out = out if out.dtype == x.dtype else out.to(x.dtype)
        return out.reshape(*x.shape[:-1], self.out_features)


class PackedInt4Weights(PackedWeights):
    """Group-wise asymmetric int4 of a [N, K] weight in the kernel's layout (W4A8).

    Groups of packing.INT4_GROUP = 32 K elements, each with a bf16 scale and minimum: 0.625
    bytes per weight. 32 is the largest group that keeps a random layer's product under the
    8 % error target (benchmarks/RESULTS.md, "int4 weights and the AVX2 GEMV": int4 group
    size).
    """

    k_group = packing.INT4_GROUP

    def __init__(self, weight: torch.Tensor, module: Any) -> None:
        self._attach(packing.pack_int4(weight), module)

    @staticmethod
    def stored(n: int, k: int) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """The tensors of an [n, k] weight: name -> (shape, dtype)."""
        return {
            "packed": ((n, k // 2), torch.uint8),
            "scales": ((n, k // packing.INT4_GROUP * 2), torch.bfloat16),
        }

    def _attach(self, tensors: dict[str, torch.Tensor], module: Any) -> None:
        self.packed = tensors["packed"]
        self.scales = tensors["scales"]
        self.out_features = int(self.packed.shape[0])
        self._gemv = module.gemv_w4a8

    def tensors(self) -> dict[str, torch.Tensor]:
        return {"packed": self.packed, "scales": self.scales}

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        if rows.dtype not in (torch.bfloat16, torch.float32) or not rows.is_contiguous():
            rows = rows.to(torch.float32).contiguous()
        out = self._gemv(rows, self.packed, self.scales, bias)
        out = out if out.dtype == x.dtype else out.to(x.dtype)
        return out.reshape(*x.shape[:-1], self.out_features)


# The packed weights of each GEMV call a weight format names (omni_cpu.weight_formats'
# `gemv_call`): a layer of that format packs into this class and calls its kernel.
PACKED_BY_CALL: dict[str, type[PackedWeights]] = {
    "bf16": PackedBf16Weights,
    "w8a8": PackedInt8Weights,
    "w4a8": PackedInt4Weights,
}


def decode_attention(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, end: int, scale: float
) -> torch.Tensor | None:
    """One query position per row over cache positions [0, end), or None without the kernel.

    q [B, H * D]; keys and values [B, G, S, D] (one layer of a FrameCache); the
    result is [B, H * D] in q's dtype (csrc/attention_decode.cpp, in the AVX2 module
    where the AVX-512 one is not used).
    """
    module = kernel() or avx2_kernel()
    if module is None or q.dtype not in (torch.bfloat16, torch.float32) or keys.shape[-1] % 16:
        return None
    return module.decode_attention(q.contiguous(), keys, values, end, scale)


def snake_beta(
    x: torch.Tensor, alpha: torch.Tensor, inv_beta: torch.Tensor, tail: torch.Tensor | None
) -> torch.Tensor | None:
    """[tail | x + inv_beta * sin(alpha * x)^2] per channel in one pass, or None without the
    kernel.

    Time-major: x [B, L, C] (bf16 or float32); alpha and inv_beta [C] (SnakeBeta's exp(alpha)
    and 1 / (exp(beta) + eps)); tail [B, keep, C] of x's dtype or None. The result is
    [B, keep + L, C] (csrc/snake.cpp, in the AVX2 module where the AVX-512 one is not used).
    """
    module = kernel() or avx2_kernel()
    if module is None or x.dtype not in (torch.bfloat16, torch.float32):
        return None
    return module.snake_beta(x.contiguous(), alpha, inv_beta, tail)
