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

Built ahead, chosen at run time (as ggml's GGML_CPU_ALL_VARIANTS): `python -m
omni_cpu.kernels.build --all` compiles every variant of this architecture (`variants`) into
prebuilt/ inside the package (the wheel's and the image's build run it; `make setup` runs it
without --all, for the one this CPU uses). A run imports the variant `chosen()` names from
there with no compiler, when one was built from the same sources, headers, flags and torch
(`prebuilt_path`). Only where none matches (a source edited since) does it compile, with
`torch.utils.cpp_extension.load`, into a per-user cache (`OMNI_CPU_KERNEL_CACHE`, default
~/.cache/omni-cpu/kernels): minutes, said in one line on stderr.

Written against torch 2.13 (`cpp_extension.load`, `at::parallel_for` on torch's OpenMP
pool, so the stage's thread binding applies).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CSRC = Path(__file__).with_name("csrc")
# The modules built ahead (gitignored; inside the wheel and the image).
PREBUILT = Path(__file__).with_name("prebuilt")

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
# Every variant the build-ahead compiles, by `platform.machine()`: one architecture's
# modules build on its own compiler.
VARIANTS: dict[str, tuple[Build, ...]] = {
    "x86_64": BUILDS,
    "amd64": BUILDS,
    "aarch64": ARM_BUILDS,
    "arm64": ARM_BUILDS,
}


def variants(machine: str | None = None) -> tuple[Build, ...]:
    """Every module of `machine`'s architecture (default this one's); () where it has none."""
    return VARIANTS.get((machine or platform.machine()).lower(), ())


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


def _keyed(build: Build, csrc: Path | None) -> bytes:
    """The bytes a module's build depends on: its sources, every header, its flags.

    A file is keyed by its name too: it is found by name (the build file names the
    sources, #include the headers), and moving text between two of them must not leave
    the hash alone.
    """
    return (
        b"".join(path.name.encode() + b"\0" + path.read_bytes() for path in build.paths(csrc))
        + b"".join(path.name.encode() + b"\0" + path.read_bytes() for path in headers(csrc))
        + " ".join(build.flags).encode()
    )


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

    keyed = _keyed(build, csrc) + Path(torch.__file__).parent.as_posix().encode()
    digest = hashlib.sha256(keyed).hexdigest()[:12]
    return cache_root() / f"torch-{torch.__version__}-{digest}"


def prebuilt_path(build: Build, csrc: Path | None = None, root: Path | None = None) -> Path:
    """Where the module built ahead from these sources lives in `root` (PREBUILT).

    Keyed like `cache_dir` but not by torch's location (a wheel's torch lives elsewhere
    than the build's): by torch's version and the Python ABI the module links against, and
    by the machine, beside the sources, headers and flags. A module built from other sources
    (a stale one) has another name, so it is never imported.
    """
    import torch

    tag = sys.implementation.cache_tag
    keyed = _keyed(build, csrc) + f"{torch.__version__} {tag} {platform.machine()}".encode()
    digest = hashlib.sha256(keyed).hexdigest()[:12]
    folder = f"{build.name}-torch-{torch.__version__}-{tag}-{digest}"
    return (root or PREBUILT) / folder / f"{build.name}.so"


def load(build: Build, csrc: Path | None = None) -> Any | None:
    """The module: the one built ahead where it matches, else compiled (or found in the cache)
    on first use; None where neither loads.

    Asks nothing of the CPU: the caller checks `runs_here` (a test compiles a module this CPU
    cannot run, and only imports it).
    """
    return _load(build, csrc or CSRC)


@functools.cache
def _load(build: Build, csrc: Path) -> Any | None:
    found = prebuilt_path(build, csrc)
    if found.is_file():
        module = _import(build, found)  # None: it said why, in one line
        if module is not None:
            return module
    elif not (cache_dir(build, csrc) / f"{build.name}.so").is_file():
        print(
            f"omni-cpu: no prebuilt {build.name} matches these sources and torch: compiling it"
            " (minutes; `make kernels`, python -m omni_cpu.kernels.build, builds it ahead)",
            file=sys.stderr,
        )
    return _compile(build, csrc)


def _import(build: Build, path: Path) -> Any | None:
    """The module built ahead at `path`, imported with no compiler; None where it will not load."""
    import torch  # noqa: F401  (the module links against the libtorch this loads)

    loader = importlib.machinery.ExtensionFileLoader(build.name, str(path))
    spec = importlib.util.spec_from_file_location(build.name, path, loader=loader)
    try:
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    except (ImportError, OSError) as exc:  # a torch of the same version but another ABI, ...
        print(f"omni-cpu: prebuilt {path} does not load ({exc}); compiling", file=sys.stderr)
        return None
    return module


def _compile(build: Build, csrc: Path) -> Any | None:
    """The module compiled (or found built) in its cache folder; None where that fails."""
    from torch.utils.cpp_extension import load as load_extension

    folder = cache_dir(build, csrc)
    try:  # a read-only home (an image's) fails here, as a missing compiler fails below
        folder.mkdir(parents=True, exist_ok=True)
        for original in (*build.paths(csrc), *headers(csrc)):  # headers for #include "..."
            copy = folder / original.name
            if not copy.exists():  # the folder's name is the content's hash: copy once
                tmp = copy.with_suffix(f".{os.getpid()}.tmp")
                shutil.copyfile(original, tmp)
                os.replace(tmp, copy)
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


def built_path(build: Build) -> Path | None:
    """The module file a run would import without compiling (prebuilt, else cached); None."""
    for path in (prebuilt_path(build), cache_dir(build) / f"{build.name}.so"):
        if path.is_file():
            return path
    return None


def build_ahead(builds: Sequence[Build], root: Path | None = None) -> list[Path]:
    """Compile each of `builds` into `root` (PREBUILT), replacing its stale builds.

    Each compiles in a child process: `load` imports what it built, and a module for a
    CPU this one is not (AVX-512 on an AVX2 build machine) must not be run here. The
    compile goes through the cache (`cache_dir`), so a module already built there is copied.
    """
    root = root or PREBUILT
    done = []
    for build in builds:
        target = prebuilt_path(build, root=root)
        if not target.is_file():
            _compile_in_child(build)
            built = cache_dir(build) / f"{build.name}.so"
            if not built.is_file():
                raise RuntimeError(f"{build.name} did not build (its compiler errors are above)")
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_suffix(f".{os.getpid()}.tmp")
            shutil.copyfile(built, tmp)
            os.replace(tmp, target)
        for stale in root.glob(f"{build.name}-torch-*"):
            if stale != target.parent:
                shutil.rmtree(stale, ignore_errors=True)
        done.append(target)
    return done


def _compile_in_child(build: Build) -> None:
    # This package first on the child's path: a wheel's build runs from its source tree.
    paths = (str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", ""))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, paths))}
    script = f"from omni_cpu.kernels import build as b; b._compile(b.named({build.name!r}), b.CSRC)"
    # Its exit status is not the verdict (a module for another CPU may die on import): the
    # built file is.
    subprocess.run([sys.executable, "-c", script], env=env, check=False)


def named(name: str) -> Build:
    """The module called `name`, of any architecture."""
    for build in (build for builds in VARIANTS.values() for build in builds):
        if build.name == name:
            return build
    raise KeyError(f"no kernel module {name!r} (omni_cpu.kernels.build.VARIANTS)")


USAGE = "usage: python -m omni_cpu.kernels.build [--all]"


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m omni_cpu.kernels.build [--all]`: build ahead into PREBUILT.

    Without --all the module this CPU uses (`make setup`: a run then only imports it), 0
    even where it does not build (runs fall back to the libraries); with --all every
    variant of this architecture (the wheel's and the image's build), 1 where one fails.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if args not in ([], ["--all"]):
        print(USAGE, file=sys.stderr)
        return 2
    if args:
        builds = variants()
        if not builds:
            print(f"kernels: no modules for {platform.machine()}: oneDNN and FBGEMM run")
            return 0
        try:
            paths = build_ahead(builds)
        except (OSError, RuntimeError) as exc:
            print(f"kernels: {exc}", file=sys.stderr)
            return 1
        for path in paths:
            print(f"kernels: {path.name} ready in {path.parent}")
        return 0
    build = chosen()
    if build is None:
        print("kernels: no module for this CPU (or OMNI_CPU_GEMV=off): oneDNN and FBGEMM run")
        return 0
    try:
        (path,) = build_ahead([build])
    except (OSError, RuntimeError) as exc:
        print(f"kernels: {exc}; runs use oneDNN/FBGEMM until it builds", file=sys.stderr)
        return 0
    print(f"kernels: {build.name} ready in {path.parent}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
