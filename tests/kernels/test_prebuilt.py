"""Kernels built ahead (omni_cpu/kernels/prebuilt/): a run imports the one the CPU states with
no compiler, and never one built from other sources."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from omni_cpu.kernels import build

REPO = Path(__file__).resolve().parents[2]

# Run with no compiler to be found: CXX/CC fail, PATH holds only python. A prebuilt module
# the CPU runs is imported and multiplies; the cache stays empty (nothing compiled).
NO_COMPILER_RUN = """
import json, sys, torch
from omni_cpu.kernels import build, gemv, packing
chosen = build.chosen()
module = build.load(chosen)
w, x = torch.randn(64, 256), torch.randn(3, 256)
want = x @ w.t()
def relative(got):
    return ((got.float() - want).norm() / want.norm()).item()
codes, scale, low = packing.quantize_int4(w.reshape(64, 256 // 32, 32))
dequantized = (codes.float() * scale[..., None] + low[..., None]).reshape(64, 256)
print(json.dumps({
    "file": module.__file__,
    "bf16": relative(gemv.PackedBf16Weights(w.to(torch.bfloat16), module)(x)),
    "int4": ((gemv.PackedInt4Weights(w, module)(x) - x @ dequantized.t()).norm()
             / (x @ dequantized.t()).norm()).item(),
}))
"""


@pytest.fixture(scope="module")
def chosen_prebuilt() -> Path:
    """The module this CPU runs, built ahead (`make setup` has; minutes where it has not)."""
    chosen = build.chosen()
    if chosen is None:
        pytest.skip("no omni-cpu module runs on this CPU (or OMNI_CPU_GEMV=off)")
    path = build.prebuilt_path(chosen)
    if not path.is_file():
        build.build_ahead([chosen])
    return path


def test_the_chosen_module_runs_with_no_compiler_and_an_empty_cache(
    chosen_prebuilt: Path, tmp_path: Path
) -> None:
    cache, bin_dir = tmp_path / "cache", tmp_path / "bin"
    cache.mkdir()
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    env = {
        **os.environ,
        "OMNI_CPU_KERNEL_CACHE": str(cache),
        "CXX": "/bin/false",
        "CC": "/bin/false",
        "PATH": str(bin_dir),
        "PYTHONPATH": str(REPO),
    }
    done = subprocess.run(
        [sys.executable, "-c", NO_COMPILER_RUN],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(result["file"]) == chosen_prebuilt
    assert result["bf16"] < 0.01 and result["int4"] < 0.015
    assert list(cache.iterdir()) == []  # no build folder, no ninja file: nothing compiled
    assert "compiling" not in done.stderr
    assert shutil.which("c++", path=env["PATH"]) is None  # the run could not have compiled


def test_a_stale_prebuilt_is_not_imported(
    chosen_prebuilt: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module built from other sources (another digest) sits where a run looks: it compiles."""
    chosen = build.chosen()
    stale = tmp_path / (chosen_prebuilt.parent.name.rsplit("-", 1)[0] + "-000000000000")
    stale.mkdir()
    shutil.copyfile(chosen_prebuilt, stale / chosen_prebuilt.name)
    monkeypatch.setattr(build, "PREBUILT", tmp_path)
    compiled = []
    monkeypatch.setattr(build, "_compile", lambda b, csrc: compiled.append(b) or "compiled")
    assert build._load.__wrapped__(chosen, build.CSRC) == "compiled"
    assert compiled == [chosen]


IMPORTED_NOT_COMPILED = """
import sys
from omni_cpu.kernels import build
def refuse(*args):
    sys.exit("compiled")
build._compile = refuse
print(build._load.__wrapped__(build.chosen(), build.CSRC).__file__)
"""


def test_a_matching_prebuilt_is_imported_without_compiling(chosen_prebuilt: Path) -> None:
    # A fresh interpreter: this one may hold the same module from another test's load, and
    # Python imports an extension module's name once per process.
    done = subprocess.run(
        [sys.executable, "-c", IMPORTED_NOT_COMPILED], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert Path(done.stdout.strip().splitlines()[-1]) == chosen_prebuilt


def _checkout(root: Path, header: str = "// h\n") -> Path:
    csrc = root / "csrc"
    csrc.mkdir(parents=True)
    for module in build.BUILDS:
        for source in module.sources:
            (csrc / source).write_text(f"// {source}\n")
    (csrc / "kernel_common.h").write_text(header)
    return csrc


def test_a_prebuilt_is_keyed_by_sources_headers_and_flags_not_by_checkout(tmp_path: Path) -> None:
    one, two = _checkout(tmp_path / "one"), _checkout(tmp_path / "two")
    edited = _checkout(tmp_path / "edited", header="// h2\n")
    assert build.prebuilt_path(build.AVX2, one) == build.prebuilt_path(build.AVX2, two)
    assert build.prebuilt_path(build.AVX2, edited) != build.prebuilt_path(build.AVX2, one)
    assert build.prebuilt_path(build.AVX2_VNNI, one) != build.prebuilt_path(build.AVX2, one)
    assert build.prebuilt_path(build.AVX2, one).parent.parent == build.PREBUILT


def test_building_ahead_replaces_a_variants_stale_builds_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMNI_CPU_KERNEL_CACHE", str(tmp_path / "cache"))

    def compile_in_child(module: build.Build) -> None:  # what the compiler would leave
        folder = build.cache_dir(module)
        folder.mkdir(parents=True)
        (folder / f"{module.name}.so").write_bytes(b"module " + module.name.encode())

    monkeypatch.setattr(build, "_compile_in_child", compile_in_child)
    root = tmp_path / "prebuilt"
    stale = root / f"{build.AVX2.name}-torch-0.0-cpython-311-000000000000"
    other = root / f"{build.AVX2_VNNI.name}-torch-0.0-cpython-311-000000000000"
    for folder in (stale, other):
        folder.mkdir(parents=True)
    (path,) = build.build_ahead([build.AVX2], root)
    assert path == build.prebuilt_path(build.AVX2, root=root)
    assert path.read_bytes() == b"module " + build.AVX2.name.encode()
    assert not stale.exists() and other.exists()


def test_every_variant_of_an_architecture_is_built_ahead() -> None:
    assert build.variants("x86_64") == build.BUILDS
    assert {build.AVX512, build.AVX2, build.AVX2_VNNI} <= set(build.variants("x86_64"))
    assert build.variants("riscv64") == ()
    assert build.named(build.AVX2_VNNI.name) is build.AVX2_VNNI


def test_the_build_command_takes_only_all() -> None:
    assert build.main(["--some"]) == 2


def test_with_no_prebuilt_a_run_says_in_one_line_that_it_compiles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(build, "PREBUILT", tmp_path / "prebuilt")
    monkeypatch.setenv("OMNI_CPU_KERNEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(build, "_compile", lambda b, csrc: "compiled")
    assert build._load.__wrapped__(build.AVX2, build.CSRC) == "compiled"
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "no prebuilt omni_cpu_gemv_avx2" in line and "compiling" in line
    assert "omni_cpu.kernels.build" in line  # how to build it ahead


def test_a_prebuilt_that_does_not_load_is_compiled_instead_said_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(build, "PREBUILT", tmp_path)
    monkeypatch.setenv("OMNI_CPU_KERNEL_CACHE", str(tmp_path / "cache"))
    broken = build.prebuilt_path(build.AVX2)
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b"not an ELF file")
    monkeypatch.setattr(build, "_compile", lambda b, csrc: "compiled")
    assert build._load.__wrapped__(build.AVX2, build.CSRC) == "compiled"
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert str(broken) in line and "does not load" in line


def test_an_arm_cpu_gets_the_best_neon_module_through_the_avx2_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The NEON modules take the AVX2 modules' calls: the linears ask avx2_kernel() for them.
    # Which one loads is decided here; loading it needs an Arm machine (the qemu tests prove
    # the kernels themselves).
    from omni_cpu.kernels import gemv

    graviton3 = frozenset({"asimd", "asimddp", "i8mm", "bf16", "fp", "sve"})
    monkeypatch.setattr(build, "cpu_isa", lambda: graviton3)
    monkeypatch.setattr(build, "load", lambda module, csrc=None: module.name)
    assert gemv.kernel() is None
    assert gemv.avx2_kernel() == build.NEON_I8MM_BF16.name
    monkeypatch.setattr(build, "cpu_isa", lambda: frozenset({"asimd", "fp"}))
    assert gemv.avx2_kernel() == build.NEON.name
    assert build.variants("aarch64") == build.ARM_BUILDS
