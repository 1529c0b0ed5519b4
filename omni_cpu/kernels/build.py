"""The C++ extension modules of csrc/: what each compiles, for which CPUs, and their build cache.

One `Build` a module: its sources, its compiler flags and the ISA flags a CPU must state to
run it (named as omni_cpu.hardware names them). Three modules:
- AVX512: bf16 and W8A8 on AVX-512 BF16/VNNI (AMX tiles where the process is granted them),
  W4A8, the code predictor's attention and step, the codec's one-pass SnakeBeta;
- AVX2: the same calls on AVX2 + FMA, for CPUs without avx512_bf16/VNNI;
- AVX2_VNNI: the AVX2 sources again with -mavxvnni (vpdpbusd for the int8 and int4 sums),
  where the CPU states avx_vnni (Alder Lake and later, Zen 5), as ggml builds one source per ISA.
All take the same packed weights (omni_cpu.kernels.packing), and so do ARM_BUILDS on aarch64
(NEON; +dotprod; +i8mm+bf16).

`torch.utils.cpp_extension.load` compiles a module into a per-user cache
(`OMNI_CPU_KERNEL_CACHE`, default ~/.cache/omni-cpu/kernels) the first time a process asks
for it (tens of seconds); `python -m omni_cpu.kernels.build`, run by
scripts/install-runtime.sh, builds the one this CPU uses so runs only load it.

Written against torch 2.13 (`cpp_extension.load`, `at::parallel_for` on torch's OpenMP
pool, so the stage's thread binding applies).
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CSRC = Path(__file__).with_name("csrc")

# -fopenmp: at::parallel_for splits column blocks over the stage's OpenMP team only when the
# module is compiled with OpenMP (GOMP_* resolve to the runtime torch loaded, or to Intel
# OpenMP where it is preloaded).
_AVX2_FLAGS = ("-O3", "-fopenmp", "-mavx2", "-mfma", "-mf16c")
# Built into every module beside its GEMV files: the W4A8 tensor call and the predictor step on
# the module's own products (gemv.h), the attention and the codec's SnakeBeta on vec.h's vectors.
_SHARED = ("gemv_w4a8.cpp", "attention_decode.cpp", "predictor_step.cpp", "snake.cpp")


@dataclass(frozen=True)
class Build:
    """One extension module: its name, its sources in csrc/ (bindings first), flags, ISA."""

    name: str
    sources: tuple[str, ...]
    flags: tuple[str, ...]
    isa: frozenset[str]  # every flag a CPU must state to run it (omni_cpu.hardware's names)

    def paths(self, csrc: Path | None = None) -> tuple[Path, ...]:
        """The source files in `csrc` (CSRC; another checkout's in tests)."""
        return tuple((csrc or CSRC) / name for name in self.sources)

    def runs_here(self) -> bool:
        """This CPU states every flag of `isa`."""
        return self.isa <= cpu_isa()


AVX512 = Build(
    name="omni_cpu_gemv",
    sources=("gemv_avx512_bf16_int8.cpp", "gemv_avx512_int4.cpp", *_SHARED),
    # The AMX flags only let the tile paths compile; they run where the CPU has AMX and the
    # caller asks (gemv.amx_rows).
    flags=(
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
    ),
    isa=frozenset({"avx512f", "avx512bw", "avx512vl", "avx512_bf16", "avx512_vnni", "fma"}),
)
AVX2 = Build(
    name="omni_cpu_gemv_avx2",
    sources=("gemv_avx2_bf16_int8.cpp", "gemv_avx2_int4.cpp", *_SHARED),
    flags=_AVX2_FLAGS,
    isa=frozenset({"avx2", "fma", "f16c"}),
)
AVX2_VNNI = Build(
    name="omni_cpu_gemv_avx2_vnni",
    sources=AVX2.sources,
    flags=(*_AVX2_FLAGS, "-mavxvnni"),
    isa=AVX2.isa | {"avx_vnni"},
)
BUILDS = (AVX512, AVX2, AVX2_VNNI)

# aarch64: the AVX2 modules' calls on NEON (csrc/gemv_neon_*.cpp), the same packed weights, one
# compile per extension level, best last. Base armv8.2-a with the extensions named (not
# armv8.6-a, which would let the compiler use every 8.6 instruction on a v8.4 Neoverse V1).
# Proved under qemu-aarch64 (tests/kernels/test_arm_kernels.py compiles the harness with these
# flags); their speed on Arm hardware is unmeasured.
_NEON_SOURCES = ("gemv_neon_bf16_int8.cpp", "gemv_neon_int4.cpp", *_SHARED)
NEON = Build(
    name="omni_cpu_gemv_neon",
    sources=_NEON_SOURCES,
    flags=("-O3", "-fopenmp", "-march=armv8-a"),
    isa=frozenset({"asimd"}),
)
NEON_DOTPROD = Build(  # SDOT for the int8 and int4 sums
    name="omni_cpu_gemv_neon_dotprod",
    sources=_NEON_SOURCES,
    flags=("-O3", "-fopenmp", "-march=armv8.2-a+dotprod"),
    isa=NEON.isa | {"asimddp"},
)
NEON_I8MM_BF16 = Build(  # and BFDOT for bf16, SMMLA for W8A8's row pairs
    name="omni_cpu_gemv_neon_i8mm_bf16",
    sources=_NEON_SOURCES,
    flags=("-O3", "-fopenmp", "-march=armv8.2-a+dotprod+i8mm+bf16"),
    isa=NEON_DOTPROD.isa | {"i8mm", "bf16"},
)
ARM_BUILDS = (NEON, NEON_DOTPROD, NEON_I8MM_BF16)


@functools.cache
def cpu_isa() -> frozenset[str]:
    """This machine's ISA flags as omni_cpu.hardware reads them (every CPU's, CPUID-checked).

    The facts, not torch's private `torch.cpu._is_*` probes: one reading of the flags for the
    planner and the kernels. AMX is the exception (gemv.amx_rows): the flag says the CPU has
    the tiles, only the module's `amx_ready` says Linux granted this process their state.
    """
    from omni_cpu.hardware import read_facts

    return frozenset(read_facts("/").isa)


def avx2_build() -> Build:
    """The AVX2 module for this CPU: the AVX-VNNI compile where it states avx_vnni."""
    return AVX2_VNNI if AVX2_VNNI.runs_here() else AVX2


def arm_build(isa: frozenset[str] | None = None) -> Build | None:
    """The best of ARM_BUILDS whose flags `isa` (this CPU's) states; None: not an Arm CPU."""
    stated = cpu_isa() if isa is None else isa
    return next((build for build in reversed(ARM_BUILDS) if build.isa <= stated), None)


def chosen() -> Build | None:
    """The module the linears use here, by the stage's `gemv` choice and the CPU; None: the
    libraries'.

    AVX-512 where it runs, else the AVX2 one; `avx2` the AVX2 one even where the AVX-512
    one runs (tests, benchmarks); `off` none; on aarch64 the best of ARM_BUILDS (arm_build).
    The choice is the talker's profile entry, or `OMNI_CPU_GEMV` where set
    (omni_cpu.profile.choices).
    """
    from omni_cpu import envs
    from omni_cpu.profile import choices

    gemv = choices.value(envs.GEMV)
    if gemv == "off":
        return None
    if "asimd" in cpu_isa():  # aarch64 (hardware reads Features only there)
        return arm_build()
    if gemv != "avx2" and AVX512.runs_here():
        return AVX512
    avx2 = avx2_build()
    return avx2 if avx2.runs_here() else None


def cache_root() -> Path:
    """The folder of every build (`OMNI_CPU_KERNEL_CACHE`, default ~/.cache/omni-cpu/kernels)."""
    from omni_cpu import envs

    configured = envs.OMNI_CPU_KERNEL_CACHE
    return Path(configured) if configured else Path.home() / ".cache" / "omni-cpu" / "kernels"


def headers(csrc: Path | None = None) -> list[Path]:
    """The headers a build may include: every *.h of `csrc` (CSRC), by name."""
    return sorted((csrc or CSRC).glob("*.h"))


def cache_dir(build: Build, csrc: Path | None = None) -> Path:
    """One build folder per torch install, module sources, headers and flags.

    An extension is tied to the torch it was built against (its version names
    the folder, its location is hashed with the sources and the flags, since the
    build file names torch's include path). torch's `load` rebuilds whenever a
    source's *path* changes, so the sources are compiled from copies inside the
    folder: every checkout of the same kernels run with the same venv (worktrees)
    shares one build, and a second venv (a CI clone's) gets its own, instead of
    each rebuilding it (tens of seconds, 1.5 GiB for the compiler) when another has run.
    """
    import torch

    # A file is keyed by its name too: it is found by name (the build file names the
    # sources, #include the headers), and moving text between two of them must not leave
    # the hash alone.
    keyed = (
        b"".join(path.name.encode() + b"\0" + path.read_bytes() for path in build.paths(csrc))
        + b"".join(path.name.encode() + b"\0" + path.read_bytes() for path in headers(csrc))
        + " ".join(build.flags).encode()
        + Path(torch.__file__).parent.as_posix().encode()
    )
    digest = hashlib.sha256(keyed).hexdigest()[:12]
    return cache_root() / f"torch-{torch.__version__}-{digest}"


def load(build: Build, csrc: Path | None = None) -> Any | None:
    """The module, compiled on first use; None where the compiler or the build fails.

    Asks nothing of the CPU: the caller checks `runs_here` (a test compiles a module this CPU
    cannot run, and only imports it).
    """
    return _load(build, csrc or CSRC)


@functools.cache
def _load(build: Build, csrc: Path) -> Any | None:
    from torch.utils.cpp_extension import load as load_extension

    folder = cache_dir(build, csrc)
    folder.mkdir(parents=True, exist_ok=True)
    for original in (*build.paths(csrc), *headers(csrc)):  # headers for #include "..."
        copy = folder / original.name
        if not copy.exists():  # the folder's name is the content's hash: copy once
            tmp = copy.with_suffix(f".{os.getpid()}.tmp")
            shutil.copyfile(original, tmp)
            os.replace(tmp, copy)
    try:
        return load_extension(
            name=build.name,
            sources=[str(folder / original.name) for original in build.paths(csrc)],
            extra_cflags=list(build.flags),
            build_directory=str(folder),
            verbose=False,
        )
    except (OSError, RuntimeError, ImportError) as exc:  # no compiler, no ninja, ...
        print(
            f"omni-cpu: GEMV kernel {build.name} not built ({exc}); using oneDNN/FBGEMM",
            file=sys.stderr,
        )
        return None


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m omni_cpu.kernels.build`: build (or find) the module this CPU uses; 0 either way.

    A command for set-up (scripts/install-runtime.sh), not for users: a run builds what it
    lacks on its own, this only moves the wait to install time.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if args:
        print("usage: python -m omni_cpu.kernels.build", file=sys.stderr)
        return 2
    build = chosen()
    if build is None:
        print("kernels: no module for this CPU (or OMNI_CPU_GEMV=off): oneDNN and FBGEMM run")
        return 0
    ready = load(build) is not None
    where = cache_dir(build)
    print(f"kernels: {build.name} {'ready in ' + str(where) if ready else 'not built (see above)'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
