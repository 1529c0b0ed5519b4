"""CPUID through py-cpuinfo: the live probe's cross-check of /proc/cpuinfo's flags."""

from __future__ import annotations

import dataclasses
import platform
import subprocess
import sys

import pytest

from omni_cpu.hardware import read_facts
from omni_cpu.hardware.cpuid import KERNEL_FLAGS, cross_check, read_cpuid_flags
from omni_cpu.hardware.cpuinfo import parse_cpuinfo
from omni_cpu.hardware.isa import read_isa
from omni_cpu.runtime.doctor import OK, WARN, check_cpuid

X86 = platform.machine() in ("x86_64", "i686")


def test_a_flag_only_a_synthesized_cpuinfo_states_is_left_out_and_noted():
    isa = ["amx_bf16", "amx_tile", "avx2", "avx512f"]
    kept, note = cross_check(isa, frozenset({"avx2", "avx512f"}))
    assert kept == ["avx2", "avx512f"]
    assert note is not None and "/proc/cpuinfo states amx_bf16 amx_tile" in note


def test_a_flag_only_cpuid_states_is_noted_and_not_used():
    kept, note = cross_check(["avx2"], frozenset({"avx2", "avx512_bf16"}))
    assert kept == ["avx2"]
    assert note is not None and "CPUID states avx512_bf16" in note


def test_agreeing_flags_leave_no_note():
    isa = ["avx2", "avx512f", "fma"]
    assert cross_check(isa, frozenset({"avx2", "avx512f"})) == (isa, None)


def test_cpuid_is_not_read_off_x86():
    assert read_cpuid_flags("aarch64") is None


@pytest.mark.skipif(not X86, reason="CPUID is x86")
def test_live_probe_keeps_the_kernel_flags_cpuid_agrees_on_and_notes_the_rest():
    cpuid = read_cpuid_flags(platform.machine())
    assert cpuid is not None and "sse4_2" in cpuid  # every x86-64 that runs vLLM has it
    with open("/proc/cpuinfo") as handle:
        stated = set(read_isa(parse_cpuinfo(handle.read()), platform.machine()))
    facts = read_facts("/")
    noted = any("CPUID" in note for note in facts.notes)
    agree = all((flag in stated) == (flag in cpuid) for flag in KERNEL_FLAGS)
    assert noted != agree
    assert {f for f in facts.isa if f in KERNEL_FLAGS} == {
        f for f in KERNEL_FLAGS if f in stated & cpuid
    }


@pytest.mark.skipif(not X86, reason="CPUID is x86")
def test_doctor_reports_whether_cpuid_agrees():
    facts = read_facts("/")
    check = check_cpuid(facts)
    assert check is not None and check.status in (OK, WARN)
    masked = dataclasses.replace(facts, notes=["CPUID states amx_bf16 that /proc/cpuinfo does not"])
    warned = check_cpuid(masked)
    assert warned is not None and warned.status == WARN and "amx_bf16" in warned.detail


def _fresh_interpreter(script: str) -> str:
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_sysroot_probe_never_imports_py_cpuinfo(machine):
    machine.cpus(online=[0, 1]).node(0, "0-1")
    script = (
        "import sys; from omni_cpu.hardware import read_facts; "
        f"read_facts({str(machine.root)!r}); "
        "print(sorted({'cpuinfo', 'omni_cpu.hardware.cpuid'} & set(sys.modules)))"
    )
    assert _fresh_interpreter(script) == "[]"


def test_the_live_probe_with_its_cpuid_check_takes_under_a_second():
    script = (
        "import time; t = time.perf_counter(); from omni_cpu.hardware import read_facts; "
        "read_facts('/'); print(time.perf_counter() - t)"
    )
    elapsed = float(_fresh_interpreter(script))
    print(f"live read_facts with imports: {elapsed * 1000:.0f} ms")
    assert elapsed < 1.0
