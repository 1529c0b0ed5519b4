"""omni-cpu's AVX-512 weight-streaming GEMV (kernels/gemv_avx512.cpp), built once per machine.

Why: at batch 1 every talker-stage step is a chain of matrix-vector products,
so its speed is the rate at which weights come out of DRAM. Measured on a 2-core
Zen 4 (avx512_bf16, avx512_vnni; one thread, the code predictor's 20 matrices
rotating through DRAM, benchmarks/gemv_kernels.py): a plain read streams
28-31 GB/s; torch's bf16 linear 10.5 GB/s, vLLM's oneDNN GEMV 16-18 GB/s,
FBGEMM's dynamic int8 20 GB/s. The kernel here streams 20-24 GB/s in bf16 and
25-29 GB/s in int8 (W8A8, VNNI): the difference is the weight layout. Rows
are repacked so that four output rows interleave in 64-byte chunks, and the
whole matrix is read as one sequential stream (four rows read side by side from
a row-major matrix are short streams the hardware prefetcher barely trains on).

How: `torch.utils.cpp_extension.load` compiles the file with AVX-512 flags
into a per-user cache (`OMNI_CPU_KERNEL_CACHE`, default
~/.cache/omni-cpu/kernels) the first time a process asks for it, ~30 s;
`scripts/install-runtime.sh` builds it at set-up so runs only load it. Only CPUs
that report avx512_bf16 and avx512_vnni build or run it; elsewhere every caller
falls back to vLLM's oneDNN GEMM (bf16/float32) and FBGEMM (int8).
`OMNI_CPU_GEMV=off` forces the fallbacks.

int8 here is W8A8: per-output-row weight scales, activations quantized per row
to 8 bits inside the call, 32-bit accumulation (no 16-bit saturation, so no
reduce_range): 1.1-1.2 % relative error per layer on random weights against
FBGEMM's 1.9 %.

Written against torch 2.13 (extension API, `at::parallel_for` on torch's
OpenMP pool, so the stage's thread binding applies).
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

GEMV_ENV = "OMNI_CPU_GEMV"
KERNEL_CACHE_ENV = "OMNI_CPU_KERNEL_CACHE"
SOURCE = Path(__file__).with_name("kernels") / "gemv_avx512.cpp"
FLAGS = ["-O3", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512bf16", "-mavx512vnni", "-mfma"]
ROWS = 4  # output rows interleaved per block (kRows in the C++)


def cpu_supports() -> bool:
    """The ISA the kernel is compiled for: avx512_bf16 and avx512_vnni."""
    return bool(torch.cpu._is_avx512_bf16_supported() and torch.cpu._is_vnni_supported())


def wanted() -> bool:
    from omni_cpu import envs

    return envs.OMNI_CPU_GEMV not in ("off", "0", "false", "no")


def cache_dir() -> Path:
    """One build folder per torch install and kernel source.

    An extension is tied to the torch it was built against (its version names
    the folder, its location is hashed with the source and the flags, since the
    build file names torch's include path). torch's `load` rebuilds whenever the
    source's *path* changes, so the source is compiled from a copy inside the
    folder: every checkout of the same kernel run with the same venv (worktrees)
    shares one build, and a second venv (a CI clone's) gets its own, instead of
    each rebuilding it (~30 s, 1.5 GiB for the compiler) when another has run.
    """
    from omni_cpu import envs

    configured = envs.OMNI_CPU_KERNEL_CACHE
    root = Path(configured) if configured else Path.home() / ".cache" / "omni-cpu" / "kernels"
    # torch's include path is in the build file too: one build per torch install (venv).
    keyed = (
        SOURCE.read_bytes()
        + " ".join(FLAGS).encode()
        + Path(torch.__file__).parent.as_posix().encode()
    )
    digest = hashlib.sha256(keyed).hexdigest()[:12]
    return root / f"torch-{torch.__version__}-{digest}"


@functools.cache
def kernel() -> Any | None:
    """The compiled module, or None where the CPU, the switch or the build says no."""
    if not (wanted() and cpu_supports()):
        return None
    from torch.utils.cpp_extension import load

    build = cache_dir()
    build.mkdir(parents=True, exist_ok=True)
    source = build / SOURCE.name
    if not source.exists():  # the folder's name is the content's hash: copy once
        tmp = source.with_suffix(f".{os.getpid()}.tmp")
        shutil.copyfile(SOURCE, tmp)
        os.replace(tmp, source)
    try:
        return load(
            name="omni_cpu_gemv",
            sources=[str(source)],
            extra_cflags=FLAGS,
            build_directory=str(build),
            verbose=False,
        )
    except (OSError, RuntimeError, ImportError) as exc:  # no compiler, no ninja, ...
        print(f"omni-cpu: GEMV kernel not built ({exc}); using oneDNN/FBGEMM", file=sys.stderr)
        return None


def fits(weight: torch.Tensor, step: int) -> bool:
    """Shapes the kernel takes: 2-D, N a multiple of ROWS, K of `step` elements."""
    return (
        weight.ndim == 2
        and not weight.is_meta
        and weight.shape[0] % ROWS == 0
        and weight.shape[1] % step == 0
    )


def _interleave(weight: torch.Tensor, chunk: int) -> torch.Tensor:
    n, k = weight.shape
    blocked = weight.reshape(n // ROWS, ROWS, k // chunk, chunk).permute(0, 2, 1, 3)
    return blocked.contiguous().reshape(n, k)


class PackedBf16Weights:
    """A bf16 [N, K] weight in the kernel's layout; call with x [..., K] in bf16."""

    def __init__(self, weight: torch.Tensor, module: Any) -> None:
        self.packed = _interleave(weight.detach().to(torch.bfloat16), 32)
        self.out_features = int(weight.shape[0])
        self._gemv = module.gemv_bf16

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        if rows.dtype != torch.bfloat16 or not rows.is_contiguous():
            rows = rows.to(torch.bfloat16).contiguous()
        out = self._gemv(rows, self.packed, bias)
        out = out if out.dtype == x.dtype else out.to(x.dtype)
        return out.reshape(*x.shape[:-1], self.out_features)


class PackedInt8Weights:
    """Per-row symmetric int8 of a [N, K] weight in the kernel's layout (W8A8)."""

    def __init__(self, weight: torch.Tensor, module: Any) -> None:
        w = weight.detach().to(torch.float32)
        scale = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-12)
        quantized = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
        self.row_sums = quantized.sum(dim=1, dtype=torch.int32)
        self.scales = scale.contiguous()
        self.packed = _interleave(quantized, 64)
        self.out_features = int(weight.shape[0])
        self._gemv = module.gemv_w8a8

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        if rows.dtype not in (torch.bfloat16, torch.float32) or not rows.is_contiguous():
            rows = rows.to(torch.float32).contiguous()
        out = self._gemv(rows, self.packed, self.scales, self.row_sums, bias)
        out = out if out.dtype == x.dtype else out.to(x.dtype)
        return out.reshape(*x.shape[:-1], self.out_features)


class KernelLinear(nn.Module):
    """Drop-in for an `nn.Linear` whose product runs through packed weights."""

    def __init__(self, linear: nn.Linear, weights: Any) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.weights = weights
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weights(x, self.bias)


def main(argv: list[str] | None = None) -> int:
    """`python -m omni_cpu.platform.gemv --build`: build (or find) the kernel; 0 either way."""
    args = sys.argv[1:] if argv is None else argv
    if args not in ([], ["--build"]):
        print("usage: python -m omni_cpu.platform.gemv [--build]", file=sys.stderr)
        return 2
    if not cpu_supports():
        print("gemv: this CPU lacks avx512_bf16/avx512_vnni; oneDNN and FBGEMM will be used")
        return 0
    module = kernel()
    print(f"gemv: {'ready in ' + str(cache_dir()) if module else 'not built (see above)'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
