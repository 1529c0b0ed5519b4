"""omni-cpu's AVX-512 weight-streaming GEMV (kernels/gemv_avx512.cpp), built once per machine.

The same extension module carries the int4 GEMV (kernels/gemv_int4.cpp) and the code
predictor's one-position attention (kernels/decode_attention.cpp, `decode_attention`
below): one build, one ISA check, one cache folder. A second module,
kernels/gemv_avx2.cpp (`avx2_kernel`), is the bf16, W8A8 and W4A8 GEMV and the same
attention for CPUs without avx512_bf16/VNNI, on the same packed weights.

Why: at batch 1 every talker-stage step is a chain of matrix-vector products,
so its speed is the rate at which weights come out of DRAM; a prefill and
batched streams multiply the same weights by more rows, so there the speed is
the multiply-add rate. Measured on a 2-core Zen 4 (avx512_bf16, avx512_vnni;
one thread, the code predictor's 20 matrices rotating through DRAM,
benchmarks/gemv_kernels.py --rows 1,4,32): a plain read streams 24-26 GB/s.

| kernel | M = 1 | M = 4 | M = 32 |
|---|---|---|---|
| this GEMV, bf16 | 6.3 ms (25 GB/s) | 6.4 ms | 25.2 ms |
| vLLM's oneDNN, bf16 | 10.1 ms | 8.2 ms | 26.7 ms |
| this GEMV, W8A8 | 3.4 ms (23 GB/s) | 3.3 ms | 14.0 ms |
| FBGEMM dynamic int8 | 4.5 ms | 4.4 ms | 15.5 ms |

The layout does it. Output columns go into the vector lanes, in blocks of 64
columns that are each one sequential stream (the hardware prefetcher follows
it), and a register tile of up to 6 rows of x by 64 columns does 24
multiply-adds per 4 weight loads with no horizontal sums, so M = 4 costs what
M = 1 does and a prefill runs at ~3.4 G vdpbf16ps/s per core. The first
layout (K in the lanes, four rows interleaved) needed a horizontal sum per
output and a full load of x per multiply-add pair: it matched this one at
M = 1 but was compute-bound from M = 4 (M = 32: 87 ms bf16, 41 ms W8A8).

How: `torch.utils.cpp_extension.load` compiles the file with AVX-512 flags
into a per-user cache (`OMNI_CPU_KERNEL_CACHE`, default
~/.cache/omni-cpu/kernels) the first time a process asks for it, ~30 s;
`scripts/install-runtime.sh` builds it at set-up so runs only load it. Only CPUs
that report avx512_bf16 and avx512_vnni build or run it; elsewhere every caller
falls back to vLLM's oneDNN GEMM (bf16/float32) and FBGEMM (int8).
`OMNI_CPU_GEMV=off` forces the fallbacks.

Threads: a call splits its column blocks over the stage's OpenMP team
(`at::parallel_for`), which needs the module compiled with -fopenmp: built
without it (until this change) the GEMV ran on one thread whatever the stage
was given, so a second core added nothing (2-core Xeon: 12.0 ms on one thread,
12.7 on two, benchmarks/gemv_kernels.py).

AMX: where the CPU has AMX tiles, products of `amx_rows` rows or more (a
prefill, a batch of streams) run on them, from the same packed blocks: a
block's [K / G][64][G] layout is already AMX's B operand. `OMNI_CPU_AMX_ROWS`
sets the row count per format (the profile carries what `probe --calibrate`
measured on the machine; "auto" is AMX_ROWS, per format). 2-core Xeon (AMX), one thread,
M = 32: bf16 15.8-16.0 ms against 56.8-57.4 on AVX-512 tiles and oneDNN's 15.4
(AMX); W8A8 6.3 ms against 18.3 (busy box, RESULTS.md has the quiet figures).

int8 here is W8A8: per-output-row weight scales, activations quantized per row
to 8 bits inside the call, 32-bit accumulation (no 16-bit saturation, so no
reduce_range): 1.1-1.2 % relative error per layer on random weights against
FBGEMM's 1.9 %.

int4 here is W4A8: groups of INT4_GROUP = 32 K elements per output row, each with a
bf16 scale and minimum (w = scale * code + minimum, codes 0..15, 0.625 bytes a weight),
activations per row to signed 8 bits, vpdpbusd with the weight nibble as the unsigned
operand. 7.4 % relative error per layer on random weights (PackedInt4Weights says why
32). AVX2: bf16 weights widened to float32 (vfmadd231ps), int8 by vpmaddubsw on |w|
and x * sign(w) (exact: a pair sum is at most 2 * 127 * 127), or AVX-VNNI's vpdpbusd
where the CPU has it; int4 by vpmaddubsw on the nibbles (at most 15: no saturation,
and a group's pair sums fit 16 bits). Without AVX2 the plan and the runner refuse int4.
`OMNI_CPU_GEMV=avx2` runs the AVX2 module on an AVX-512 CPU (tests, benchmarks).
Measured on the 2-core Intel Xeon KVM guest (AVX-512 + AMX, a busy shared box, one
thread, benchmarks/gemv_kernels.py --rows 1,4,32 --copies 12: 12 x 20 matrices of the
code predictor, past its 480 MiB L3; plain read 11.9 GB/s), ms per 5-layer step:

| kernel | M = 1 | M = 4 | M = 32 |
|---|---|---|---|
| bf16 | 14.9 ms (10.5 GB/s) | 21.4 ms | 57.5 ms |
| W8A8 | 5.9 ms (13.2 GB/s; 11.9 with --copies 30) | 7.9 ms | 17.4 ms |
| W4A8 | 4.4 ms (11.1 GB/s; 10.8 with --copies 30) | 5.4 ms | 18.2 ms |
| AVX2 bf16 | 16.3 ms (9.6 GB/s) | 24.3 ms | 101 ms |
| AVX2 W8A8 (AVX-VNNI) | 7.4 ms (10.7 GB/s) | 11.4 ms | 46.0 ms |
| AVX2 W4A8 (vpmaddubsw) | 5.6 ms (8.8 GB/s) | 11.2 ms | 36.5 ms |

AVX2 W4A8 with AVX-VNNI (A/B against vpmaddubsw in one process, 120 matrices):
11.0 against 9.1 GB/s at M = 1, 43.7 against 60.5 ms at M = 4.

Written against torch 2.13 (extension API, `at::parallel_for` on torch's
OpenMP pool, so the stage's thread binding applies) and Linux's AMX permission
call (arch_prctl ARCH_REQ_XCOMP_PERM, kernel 5.16+; refused: no AMX, AVX-512 only).
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

SOURCE = Path(__file__).with_name("csrc") / "gemv_avx512.cpp"  # holds the module's bindings
# beside SOURCE, in the same module; predictor_step.cpp chains the others' products
EXTRA_SOURCES = ("decode_attention.cpp", "gemv_int4.cpp", "predictor_step.cpp")
# -fopenmp: at::parallel_for splits column blocks over the stage's OpenMP team only
# when the module is compiled with OpenMP (GOMP_* resolve to the runtime torch loaded,
# or to Intel OpenMP where it is preloaded). The AMX flags only let the tile paths
# compile; they run where the CPU has AMX and the caller asks (amx_rows).
FLAGS = [
    "-O3",
    "-fopenmp",
    "-mavx512f",
    "-mavx512bw",
    "-mavx512vl",
    "-mavx512bf16",
    "-mavx512vnni",
    "-mfma",
    "-mamx-tile",
    "-mamx-bf16",
    "-mamx-int8",
]
# The AVX2 build: a second module, nothing AVX-512 (AVX-VNNI by a run-time choice inside);
# decode_attention.cpp and predictor_step.cpp are built into it too, on vec.h's 8-lane
# vectors and this module's products.
AVX2_SOURCE = SOURCE.with_name("gemv_avx2.cpp")
AVX2_SOURCES = (
    AVX2_SOURCE,
    SOURCE.with_name("decode_attention.cpp"),
    SOURCE.with_name("predictor_step.cpp"),
)
# The headers the sources include ("kernel_common.h", ...) are every *.h beside a module's
# first source: hashed into its build folder's name with the sources (a header edit
# rebuilds the module) and copied there beside them, where the #include "..." finds them.
AVX2_FLAGS = ["-O3", "-fopenmp", "-mavx2", "-mfma", "-mf16c"]
LANES = 16  # output columns per vector: N must be a multiple (kLanes in the C++)
BLOCK = 64  # output columns per packed block (kBlock in the C++)
BF16_GROUP = 2  # K elements per lane per multiply-add: vdpbf16ps takes pairs
INT8_GROUP = 4  # vpdpbusd takes quads
INT4_GROUP = 32  # K elements per (scale, minimum) of the int4 weights (kGroup in gemv_int4.cpp)
INT4_REFITS = 2  # least-squares refits of each group's scale and minimum
QUANTIZE_ROWS = 256  # rows of a weight quantized at once
# Rows from which a product takes AMX tiles where the CPU has them, unless the profile
# says otherwise. 2-core Xeon (AMX), benchmarks/gemv_kernels.py, 1 and 2 threads: in bf16
# AMX matches the AVX-512 tiles at 1 row and beats them from 2 (M = 4: 15.8 against 22.8
# ms, one thread); in int8 the AVX-512 W8A8 tiles stay ahead up to ~8 rows.
AMX_ROWS = {"bf16": 2, "int8": 16}


def sources() -> list[Path]:
    """Every C++ file of the module, SOURCE first."""
    return [SOURCE, *(SOURCE.with_name(name) for name in EXTRA_SOURCES)]


def headers(paths: Sequence[Path]) -> list[Path]:
    """The headers a build of `paths` may include: every *.h beside its first source, by name."""
    return sorted(paths[0].parent.glob("*.h"))


@functools.cache
def cpu_supports() -> bool:
    """The ISA the kernel is compiled for: avx512_bf16 and avx512_vnni."""
    return bool(torch.cpu._is_avx512_bf16_supported() and torch.cpu._is_vnni_supported())


def amx_supported() -> bool:
    """AMX tiles (every AMX CPU so far has amx_bf16 and amx_int8 with amx_tile)."""
    return bool(torch.cpu._is_amx_tile_supported())


def amx_rows(weights: str) -> int:
    """Rows from which a `weights` ("bf16" or "int8") product takes AMX tiles; 0 = never.

    The talker's `amx_rows` choice (its profile entry: what `probe --calibrate` measured); "auto"
    is AMX_ROWS where the CPU has AMX and this process was granted its state.
    """
    from omni_cpu import envs
    from omni_cpu.profile import choices

    module = kernel()
    if module is None or not amx_supported() or not module.amx_ready():
        return 0
    chosen = choices.value(envs.AMX_ROWS) or {}
    return max(0, chosen.get(weights, AMX_ROWS.get(weights, 0)))


@functools.cache
def avx2_cpu_supports() -> bool:
    """The AVX2 build's ISA: AVX2 and FMA (torch's own AVX2 kernels need both too)."""
    return torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")


def wanted() -> bool:
    from omni_cpu import envs
    from omni_cpu.profile import choices

    return choices.value(envs.GEMV) != "off"


def forced_avx2() -> bool:
    """`OMNI_CPU_GEMV=avx2`: the AVX2 build even where the AVX-512 one runs (tests, benchmarks)."""
    from omni_cpu import envs
    from omni_cpu.profile import choices

    return choices.value(envs.GEMV) == "avx2"


def cache_root() -> Path:
    """The folder of every build (`OMNI_CPU_KERNEL_CACHE`, default ~/.cache/omni-cpu/kernels)."""
    from omni_cpu import envs

    configured = envs.OMNI_CPU_KERNEL_CACHE
    return Path(configured) if configured else Path.home() / ".cache" / "omni-cpu" / "kernels"


def cache_dir(paths: Sequence[Path] | None = None, flags: Sequence[str] | None = None) -> Path:
    """One build folder per torch install and kernel source (the AVX-512 module's by default).

    An extension is tied to the torch it was built against (its version names
    the folder, its location is hashed with the source and the flags, since the
    build file names torch's include path). torch's `load` rebuilds whenever the
    source's *path* changes, so the source is compiled from a copy inside the
    folder: every checkout of the same kernel run with the same venv (worktrees)
    shares one build, and a second venv (a CI clone's) gets its own, instead of
    each rebuilding it (~30 s, 1.5 GiB for the compiler) when another has run.
    """
    root = cache_root()
    paths = sources() if paths is None else paths
    # torch's include path is in the build file too: one build per torch install (venv).
    # A header is keyed by its name too: it is found by name, and moving text between two
    # of them must not leave the hash alone.
    keyed = (
        b"".join(path.read_bytes() for path in paths)
        + b"".join(path.name.encode() + b"\0" + path.read_bytes() for path in headers(paths))
        + " ".join(FLAGS if flags is None else flags).encode()
        + Path(torch.__file__).parent.as_posix().encode()
    )
    digest = hashlib.sha256(keyed).hexdigest()[:12]
    return root / f"torch-{torch.__version__}-{digest}"


def kernel() -> Any | None:
    """The AVX-512 module, or None where the CPU, the switch (off, avx2) or the build says no."""
    if not (wanted() and cpu_supports()) or forced_avx2():
        return None
    return _build("omni_cpu_gemv", tuple(sources()), tuple(FLAGS))


def avx2_kernel() -> Any | None:
    """The AVX2 module (same packed layout and call signatures), or None; built on first use.

    The caller asks for it where `kernel()` is None: a CPU without avx512_bf16/VNNI
    or `OMNI_CPU_GEMV=avx2`.
    """
    if not (wanted() and avx2_cpu_supports()):
        return None
    return _build("omni_cpu_gemv_avx2", AVX2_SOURCES, tuple(AVX2_FLAGS))


def build_name() -> str | None:
    """The build folder's name of the module the linears use here (AVX-512, else AVX2), or None.

    It is the hash of that module's sources and flags and of the torch it was built
    against, so it names the kernel build in the packed-weight cache's key
    (omni_cpu.kernels.weight_cache). Asks for the module (built once per process).
    """
    if kernel() is not None:
        return cache_dir().name
    if avx2_kernel() is not None:
        return cache_dir(AVX2_SOURCES, AVX2_FLAGS).name
    return None


@functools.cache
def _build(name: str, paths: tuple[Path, ...], flags: tuple[str, ...]) -> Any | None:
    from torch.utils.cpp_extension import load

    build = cache_dir(paths, flags)
    build.mkdir(parents=True, exist_ok=True)
    for original in (*paths, *headers(paths)):  # headers beside the sources, for #include "..."
        copy = build / original.name
        if not copy.exists():  # the folder's name is the content's hash: copy once
            tmp = copy.with_suffix(f".{os.getpid()}.tmp")
            shutil.copyfile(original, tmp)
            os.replace(tmp, copy)
    try:
        return load(
            name=name,
            sources=[str(build / original.name) for original in paths],
            extra_cflags=list(flags),
            build_directory=str(build),
            verbose=False,
        )
    except (OSError, RuntimeError, ImportError) as exc:  # no compiler, no ninja, ...
        print(
            f"omni-cpu: GEMV kernel {name} not built ({exc}); using oneDNN/FBGEMM", file=sys.stderr
        )
        return None


def fits(weight: torch.Tensor, group: int) -> bool:
    """Shapes the kernel takes: 2-D, N a multiple of LANES, K of `group` elements."""
    return (
        weight.ndim == 2
        and not weight.is_meta
        and weight.shape[0] % LANES == 0
        and weight.shape[1] % group == 0
    )


def _pack(weight: torch.Tensor, group: int) -> torch.Tensor:
    """[N, K] -> the kernel's layout: blocks of BLOCK columns, each [K / group][width][group].

    Output columns go into the vector lanes and `group` consecutive K elements
    into each lane, so one block is one sequential stream; the last block holds
    the N % BLOCK columns left over (16, 32 or 48).
    """
    n, k = weight.shape
    full = n // BLOCK * BLOCK

    def blocks(part: torch.Tensor, width: int) -> torch.Tensor:
        rows = part.shape[0]
        return part.reshape(rows // width, width, k // group, group).permute(0, 2, 1, 3)

    packed = blocks(weight[:full], BLOCK).reshape(-1)
    if full < n:
        packed = torch.cat([packed, blocks(weight[full:], n - full).reshape(-1)])
    return packed.contiguous().reshape(n, k)


class PackedWeights:
    """What every packed weight shares: its state is `tensors()`, rebuilt by `from_tensors`.

    So a packed weight can be stored and mapped back without packing again
    (omni_cpu.kernels.weight_cache).
    """

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

    def __init__(self, weight: torch.Tensor, module: Any) -> None:
        self._attach({"packed": _pack(weight.detach().to(torch.bfloat16), BF16_GROUP)}, module)

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

    def __init__(self, weight: torch.Tensor, module: Any) -> None:
        n = int(weight.shape[0])
        quantized = torch.empty(weight.shape, dtype=torch.int8)
        scales = torch.empty(n, dtype=torch.float32)
        # A few hundred rows at a time: the float32 temporaries of a whole 6144 x 1024
        # matrix are ~100 MB, of a slice ~4 MB, and the load's peak is what they add.
        for start in range(0, n, QUANTIZE_ROWS):
            rows = weight[start : start + QUANTIZE_ROWS].detach().to(torch.float32, copy=True)
            scale = (rows.abs().amax(dim=1) / 127.0).clamp(min=1e-12)
            scales[start : start + QUANTIZE_ROWS] = scale
            quantized[start : start + QUANTIZE_ROWS] = (
                rows.div_(scale[:, None]).round_().clamp_(-127, 127).to(torch.int8)
            )
        row_sums = quantized.sum(dim=1, dtype=torch.int32)
        packed = _pack(quantized, INT8_GROUP)
        self._attach({"packed": packed, "scales": scales, "row_sums": row_sums}, module)

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


def quantize_int4(groups: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """float32 [..., INT4_GROUP] -> (codes uint8 0..15, scale, minimum), w ~ scale * code + minimum.

    Asymmetric per group: start from the group's min and max (15 steps between), then
    refit scale and minimum by least squares to the codes they gave, INT4_REFITS times.
    Scale and minimum are rounded to bf16 (what the kernel stores) before the codes are
    taken, so that rounding costs nothing. Modifies nothing it is given.
    """
    n = groups.shape[-1]
    low = groups.amin(dim=-1, keepdim=True)
    scale = ((groups.amax(dim=-1, keepdim=True) - low) / 15.0).clamp_(min=1e-12)

    def codes_for(scale: torch.Tensor, low: torch.Tensor) -> torch.Tensor:
        return (groups - low).div_(scale).round_().clamp_(0, 15)

    for refit in range(INT4_REFITS + 1):
        scale = scale.to(torch.bfloat16).float().clamp_(min=1e-12)
        low = low.to(torch.bfloat16).float()
        codes = codes_for(scale, low)
        if refit == INT4_REFITS:
            break
        sum_c, sum_cc = codes.sum(-1, keepdim=True), (codes * codes).sum(-1, keepdim=True)
        sum_w, sum_cw = groups.sum(-1, keepdim=True), (codes * groups).sum(-1, keepdim=True)
        det = n * sum_cc - sum_c * sum_c
        fitted = (n * sum_cw - sum_c * sum_w) / det.clamp(min=1e-30)
        ok = (det > 0.5) & (fitted > 0)  # all codes equal: keep min/max
        scale = torch.where(ok, fitted, scale)
        low = torch.where(ok, (sum_w - fitted * sum_c) / n, low)
    return codes.to(torch.uint8), scale.squeeze(-1), low.squeeze(-1)


class PackedInt4Weights(PackedWeights):
    """Group-wise asymmetric int4 of a [N, K] weight in the kernel's layout (W4A8).

    Groups of INT4_GROUP = 32 K elements, each with a bf16 scale and minimum: 0.625 bytes
    per weight. Measured relative error of one layer's product on random weights
    (1024 x 1024, 8 rows of x, the float32 reference): groups of 32: 7.4 % (0.625 B);
    64: 8.5 % (0.5625 B); 128: 9.6 % (0.53 B); symmetric [-7, 7] 9.8 / 10.8 / 11.9 %.
    32 is the only size under the 8 % target, for 11 % more bytes than 64.
    """

    def __init__(self, weight: torch.Tensor, module: Any) -> None:
        n, k = (int(d) for d in weight.shape)
        groups = k // INT4_GROUP
        nibbles = torch.empty(n, k // 2, dtype=torch.uint8)
        pairs = torch.empty(n, groups, 2, dtype=torch.bfloat16)  # (scale, minimum)
        for start in range(0, n, QUANTIZE_ROWS):  # slices: see PackedInt8Weights
            rows = weight[start : start + QUANTIZE_ROWS].detach().to(torch.float32, copy=True)
            codes, scale, low = quantize_int4(rows.reshape(rows.shape[0], groups, INT4_GROUP))
            pairs[start : start + QUANTIZE_ROWS, :, 0] = scale
            pairs[start : start + QUANTIZE_ROWS, :, 1] = low
            # Byte j of each 8-element step: element j low, element 4 + j high.
            steps = codes.reshape(rows.shape[0], k // 8, 2, 4)
            nibbles[start : start + QUANTIZE_ROWS] = (
                steps[:, :, 0] | (steps[:, :, 1] << 4)
            ).reshape(rows.shape[0], k // 2)
        packed = _pack(nibbles, 4)  # [K / 8][width][4 bytes] per block
        scales = _pack(pairs.reshape(n, groups * 2), 2)  # [K / 32][width][2] per block
        self._attach({"packed": packed, "scales": scales}, module)

    @staticmethod
    def stored(n: int, k: int) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """The tensors of an [n, k] weight: name -> (shape, dtype)."""
        return {
            "packed": ((n, k // 2), torch.uint8),
            "scales": ((n, k // INT4_GROUP * 2), torch.bfloat16),
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


def decode_attention(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, end: int, scale: float
) -> torch.Tensor | None:
    """One query position per row over cache positions [0, end), or None without the kernel.

    q [B, H * D]; keys and values [B, G, S, D] (one layer of a FrameCache); the
    result is [B, H * D] in q's dtype (kernels/decode_attention.cpp, in the AVX2 module
    where the AVX-512 one is not used).
    """
    module = kernel() or avx2_kernel()
    if module is None or q.dtype not in (torch.bfloat16, torch.float32) or keys.shape[-1] % 16:
        return None
    return module.decode_attention(q.contiguous(), keys, values, end, scale)


def main(argv: list[str] | None = None) -> int:
    """`python -m omni_cpu.kernels.gemv --build`: build (or find) this CPU's GEMV; 0 either way."""
    args = sys.argv[1:] if argv is None else argv
    if args not in ([], ["--build"]):
        print("usage: python -m omni_cpu.kernels.gemv [--build]", file=sys.stderr)
        return 2
    if cpu_supports() and not forced_avx2():
        module = kernel()
        print(f"gemv: {'ready in ' + str(cache_dir()) if module else 'not built (see above)'}")
        return 0
    if not avx2_cpu_supports():
        print("gemv: this CPU lacks AVX2 and avx512_bf16/VNNI; oneDNN and FBGEMM will be used")
        return 0
    built = avx2_kernel() is not None
    where = cache_dir(AVX2_SOURCES, AVX2_FLAGS)
    print(f"gemv: AVX2 build {'ready in ' + str(where) if built else 'not built (see above)'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
