"""x86 CPUID on the live machine, through py-cpuinfo, to cross-check /proc/cpuinfo.

/proc/cpuinfo is what the kernel says; CPUID is what the processor (or the
hypervisor in front of it) says. They differ where cpuinfo is synthesized or
masked (sandboxed kernels, some hypervisors) and where a kernel does not enable
a feature's register state (AMX before Linux 5.16). The probe keeps a kernel
flag only where both agree, and notes each disagreement.

py-cpuinfo's own `get_cpu_info()` spawns a process and times the clock for a
second, and its `CPUID.get_flags()` leaves out leaf 7's EDX and subleaf 1 (AMX,
AVX-VNNI, AVX512-BF16) and clobbers RBX, which is why it runs in a child. Here
its `ASM` runner executes a few CPUID stubs that save RBX, in this process: a
few milliseconds. Imported only for the live probe and `doctor`, never for a
`--sysroot` dump.
"""

from __future__ import annotations

import ctypes

# The flags the kernels need (vLLM's CPU kernels and omni-cpu's own).
KERNEL_FLAGS = (
    "avx2",
    "avx512f",
    "avx512_bf16",
    "avx512_vnni",
    "avx_vnni",
    "amx_bf16",
    "amx_int8",
    "amx_tile",
)

# (leaf, subleaf, register, bit) of each flag hardware.isa tracks, as the kernel
# names them (arch/x86/include/asm/cpufeatures.h).
_BITS = {
    "sse4_2": (1, 0, "ecx", 20),
    "fma": (1, 0, "ecx", 12),
    "avx": (1, 0, "ecx", 28),
    "f16c": (1, 0, "ecx", 29),
    "avx2": (7, 0, "ebx", 5),
    "avx512f": (7, 0, "ebx", 16),
    "avx512bw": (7, 0, "ebx", 30),
    "avx512vl": (7, 0, "ebx", 31),
    "avx512_vnni": (7, 0, "ecx", 11),
    "avx512_fp16": (7, 0, "edx", 23),
    "amx_bf16": (7, 0, "edx", 22),
    "amx_tile": (7, 0, "edx", 24),
    "amx_int8": (7, 0, "edx", 25),
    "avx_vnni": (7, 1, "eax", 4),
    "avx512_bf16": (7, 1, "eax", 5),
}

# `mov eax, <register>` after CPUID; EAX needs none.
_MOVE_TO_EAX = {"eax": b"", "ebx": b"\x89\xd8", "ecx": b"\x89\xc8", "edx": b"\x89\xd0"}


def _stub(leaf: int, subleaf: int, register: str) -> bytes:
    """push rbx; mov eax, leaf; mov ecx, subleaf; cpuid; mov eax, reg; pop rbx; ret."""
    return (
        b"\x53"
        + b"\xb8"
        + leaf.to_bytes(4, "little")
        + b"\xb9"
        + subleaf.to_bytes(4, "little")
        + b"\x0f\xa2"
        + _MOVE_TO_EAX[register]
        + b"\x5b\xc3"
    )


def read_cpuid_flags(architecture: str) -> frozenset[str] | None:
    """The tracked x86 flags CPUID states here; None off x86 or where it cannot run."""
    if architecture not in ("x86_64", "i686", "i386"):
        return None
    try:
        from cpuinfo.cpuinfo import ASM
    except ImportError:  # the light install without py-cpuinfo
        return None

    def cpuid(leaf: int, subleaf: int, register: str) -> int:
        asm = ASM(ctypes.c_uint32, (), [_stub(leaf, subleaf, register)])
        asm.compile()
        try:
            return int(asm.run())
        finally:
            asm.free()

    try:
        max_leaf = cpuid(0, 0, "eax")
        registers: dict[tuple[int, int, str], int] = {}
        for leaf, subleaf, register, _bit in _BITS.values():
            if leaf > max_leaf or (leaf, subleaf, register) in registers:
                continue
            if leaf == 7 and subleaf > 0 and subleaf > cpuid(7, 0, "eax"):
                continue  # subleaf 1 absent: its flags read as unset
            registers[(leaf, subleaf, register)] = cpuid(leaf, subleaf, register)
    except (OSError, ValueError, TypeError, AttributeError):
        # No executable mapping allowed (SELinux execmem, W^X policies).
        return None
    return frozenset(
        name
        for name, (leaf, subleaf, register, bit) in _BITS.items()
        if registers.get((leaf, subleaf, register), 0) >> bit & 1
    )


def cross_check(isa: list[str], cpuid_flags: frozenset[str]) -> tuple[list[str], str | None]:
    """(isa with each kernel flag kept only where CPUID agrees, the note; None if agreed)."""
    stated = set(isa)
    only_cpuinfo = sorted(flag for flag in KERNEL_FLAGS if flag in stated - cpuid_flags)
    only_cpuid = sorted(flag for flag in KERNEL_FLAGS if flag in cpuid_flags - stated)
    if not only_cpuinfo and not only_cpuid:
        return isa, None
    parts = []
    if only_cpuinfo:
        parts.append(
            f"/proc/cpuinfo states {' '.join(only_cpuinfo)} that CPUID does not "
            "(a synthesized cpuinfo?): left out, the instructions would fault"
        )
    if only_cpuid:
        parts.append(
            f"CPUID states {' '.join(only_cpuid)} that /proc/cpuinfo does not "
            "(masked by the kernel or hypervisor, or its register state not enabled): "
            "not used"
        )
    kept = [flag for flag in isa if flag not in only_cpuinfo]
    return kept, "; ".join(parts)
