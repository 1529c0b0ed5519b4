"""The aarch64 kernels (csrc/gemv_neon_*.cpp, vec.h's NEON vectors), proved without Arm hardware.

Each of build.ARM_BUILDS is cross-compiled by Debian's aarch64-linux-gnu-g++ (-static, with the
build's own -march flags, -DOMNI_CPU_STANDALONE: no libtorch) into tests/kernels/arm/harness.cpp,
and run under qemu-aarch64 on the cases of tests/kernels/arm/cases.py: weights packed by
packing.py (the x86 modules' layout), references and bounds of the x86 kernel tests. Three CPU
models: `max` (dotprod, i8mm, bf16: every build runs), neoverse-n1 (dotprod, no i8mm/bf16) and
cortex-a53 (plain ASIMD): a build whose extensions the CPU lacks must refuse to run, as
build.arm_build would not choose it there. The harness counts its checks; each run must pass
all of them. Speed on Arm is not measured here (qemu emulates).

`make setup` installs the tools as root (scripts/setup.sh); without them these tests fail with
the install line, unless OMNI_CPU_SKIP_ARM=1.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the inference runtime is not installed")

from omni_cpu.kernels import build
from tests.kernels.arm import cases

# One xdist worker (make test's --dist loadgroup) compiles the builds and writes the cases once.
pytestmark = [pytest.mark.core_model, pytest.mark.cpu, pytest.mark.xdist_group("arm-kernels")]

HARNESS = Path(__file__).with_name("arm") / "harness.cpp"
COMPILER, EMULATOR = "aarch64-linux-gnu-g++", "qemu-aarch64"
# The build's sources that need no torch: the predictor step's is torch's own classes.
STANDALONE_SOURCES = tuple(name for name in build.NEON.sources if name != "predictor_step.cpp")
# What each build's products use (the harness's first word) and which CPU models run it.
LABELS = {
    "omni_cpu_gemv_neon": "asimd",
    "omni_cpu_gemv_neon_dotprod": "sdot",
    "omni_cpu_gemv_neon_i8mm_bf16": "bfdot+smmla",
}
CPU_MODELS = {  # model: the ISA flags it states, as /proc/cpuinfo names them
    "max": frozenset({"asimd", "asimddp", "i8mm", "bf16"}),
    "neoverse-n1": frozenset({"asimd", "asimddp"}),
    "cortex-a53": frozenset({"asimd"}),
}


@pytest.fixture(scope="module")
def tools() -> None:
    missing = [tool for tool in (COMPILER, EMULATOR) if shutil.which(tool) is None]
    if not missing:
        return
    if os.environ.get("OMNI_CPU_SKIP_ARM") == "1":
        pytest.skip(f"OMNI_CPU_SKIP_ARM=1 and {', '.join(missing)} missing")
    pytest.fail(
        f"{', '.join(missing)} missing: apt-get install g++-aarch64-linux-gnu qemu-user "
        "(make setup does as root), or set OMNI_CPU_SKIP_ARM=1 to skip the Arm kernel tests",
        pytrace=False,
    )


@pytest.fixture(scope="module")
def case_folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    folder = tmp_path_factory.mktemp("arm-cases")
    written = cases.all_cases()
    cases.write(written, folder)
    return folder, len(written)


@pytest.fixture(scope="module")
def binaries(tools: None, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every Arm build's harness, compiled at once (a minute on a busy two-core box)."""
    folder = tmp_path_factory.mktemp("arm-bin")
    compiles = {}
    for arm in build.ARM_BUILDS:
        flags = [flag for flag in arm.flags if flag != "-fopenmp"]  # parallel.h: a plain loop
        out = folder / arm.name
        command = [
            COMPILER,
            "-std=c++17",
            "-static",
            "-Wall",
            "-Werror",
            "-DOMNI_CPU_STANDALONE",
            *flags,
            f"-I{build.CSRC}",
            str(HARNESS),
            *(str(build.CSRC / name) for name in STANDALONE_SOURCES),
            "-o",
            str(out),
        ]
        compiles[arm.name] = (out, subprocess.Popen(command, stderr=subprocess.PIPE, text=True))
    for name, (_, running) in compiles.items():
        _, errors = running.communicate()
        assert running.returncode == 0, f"{name} did not compile:\n{errors}"
    return {name: out for name, (out, _) in compiles.items()}


@pytest.mark.parametrize("model", list(CPU_MODELS))
@pytest.mark.parametrize("arm", build.ARM_BUILDS, ids=lambda arm: arm.name)
def test_each_arm_build_passes_every_case_or_refuses_a_cpu_it_needs_more_of(
    arm: build.Build, model: str, binaries: dict[str, Path], case_folder: tuple[Path, int]
) -> None:
    folder, count = case_folder
    ran = subprocess.run(
        [EMULATOR, "-cpu", model, str(binaries[arm.name]), str(folder)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    label = LABELS[arm.name]
    if arm.isa <= CPU_MODELS[model]:
        failures = [line for line in ran.stdout.splitlines() if line.startswith("FAIL")]
        assert ran.stdout.splitlines()[-1] == f"{label}: {count} passed, 0 failed", failures
        assert ran.returncode == 0
    else:
        assert ran.returncode == 3, ran.stdout + ran.stderr
        lacking = re.fullmatch(rf"{re.escape(label)}: refused: this CPU lacks (\S+)\n", ran.stdout)
        assert lacking and lacking.group(1) in arm.isa - CPU_MODELS[model]


@pytest.mark.parametrize("model,isa", list(CPU_MODELS.items()))
def test_the_runtime_chooses_the_best_arm_build_the_cpu_states(model: str, isa: frozenset) -> None:
    best = build.arm_build(isa)
    assert best is not None and best.isa <= isa
    assert all(not arm.isa <= isa or arm.isa <= best.isa for arm in build.ARM_BUILDS), model
    assert build.arm_build(frozenset({"avx2", "fma"})) is None  # x86: not an Arm build


def test_every_arm_build_compiles_the_sources_of_the_x86_modules_calls() -> None:
    """The NEON modules carry the shared files and the AVX2 modules' two GEMV files' roles."""
    for arm in build.ARM_BUILDS:
        assert set(arm.sources) - {"gemv_neon_bf16_int8.cpp", "gemv_neon_int4.cpp"} == (
            set(build.AVX2.sources) - {"gemv_avx2_bf16_int8.cpp", "gemv_avx2_int4.cpp"}
        )


def test_chosen_is_the_arm_build_on_arm_flags_and_off_turns_it_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    x3 = {"fp", "asimd", "asimddp", "i8mm", "bf16", "sve"}  # tests/data/sysroots' Arm dump's
    cases = [
        (x3, "auto", build.NEON_I8MM_BF16),
        ({"fp", "asimd", "asimddp"}, "auto", build.NEON_DOTPROD),  # Neoverse N1
        ({"fp", "asimd"}, "auto", build.NEON),  # Cortex-A72
        (x3, "off", None),
    ]
    for flags, switch, want in cases:
        monkeypatch.setattr(build, "cpu_isa", lambda flags=flags: frozenset(flags))
        monkeypatch.setenv("OMNI_CPU_GEMV", switch)
        assert build.chosen() == want, (sorted(flags), switch)
