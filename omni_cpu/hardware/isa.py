"""The instruction-set flags that matter for inference, per architecture.

Only flags that change what the planner may choose are kept (dtype, GEMM
paths): bf16/fp16/int8 dot products, vector widths, matrix engines. A flag is
kept only when every CPU has it, so a thread may land on any core.
"""

from __future__ import annotations

import re

from omni_cpu.hardware.cpuinfo import CpuInfo

X86_FLAGS = (
    "sse4_2",
    "avx",
    "f16c",
    "fma",
    "avx2",
    "avx_vnni",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
)
AARCH64_FLAGS = (
    "fp",
    "asimd",
    "fphp",
    "asimdhp",
    "asimddp",
    "asimdfhm",
    "i8mm",
    "bf16",
    "sve",
    "sve2",
    "svebf16",
    "svei8mm",
    "sme",
)
ARM32_FLAGS = ("half", "vfp", "vfpv3", "vfpv4", "neon", "idiva")
S390_FLAGS = ("vx", "vxd", "vxe", "vxe2", "nnpa", "sie", "te")
LOONGARCH_FLAGS = ("fpu", "lsx", "lasx", "crypto")
RISCV_EXTENSIONS = ("v", "zfh", "zfhmin", "zvfh", "zvfhmin", "zba", "zbb")

# "cpu : POWER7 (architected), altivec supported"
_PPC_FEATURE_TEXT = re.compile(r"\b(altivec|vsx)\b", re.IGNORECASE)


def read_isa(cpuinfo: CpuInfo, architecture: str) -> list[str]:
    """Sorted flags that matter and that every CPU states."""
    if architecture in ("x86_64", "i686", "i386"):
        found = _common_words(cpuinfo, "flags") & set(X86_FLAGS)
    elif architecture == "aarch64":
        found = _common_words(cpuinfo, "features") & set(AARCH64_FLAGS)
        if {"fphp", "asimdhp"} <= found:
            found.add("fp16")  # half-precision arithmetic, scalar and vector
    elif architecture.startswith("arm"):
        found = _common_words(cpuinfo, "features") & set(ARM32_FLAGS)
    elif architecture.startswith("s390"):
        found = _common_words(cpuinfo, "features") & set(S390_FLAGS)
    elif architecture.startswith("loongarch"):
        found = _common_words(cpuinfo, "features") & set(LOONGARCH_FLAGS)
    elif architecture.startswith("riscv"):
        found = _riscv_extensions(cpuinfo)
    elif architecture.startswith("ppc"):
        found = {m.lower() for m in _PPC_FEATURE_TEXT.findall(cpuinfo.first("cpu") or "")}
    else:
        found = set()
    return sorted(found)


def _common_words(cpuinfo: CpuInfo, key: str) -> set[str]:
    lines = cpuinfo.values(key)
    if not lines:
        return set()
    words = set(lines[0].split())
    for line in lines[1:]:
        words &= set(line.split())
    return words


def _riscv_extensions(cpuinfo: CpuInfo) -> set[str]:
    """`rv64imafdcv_zba_zbb` → {"v", "zba", "zbb"} among the ones we track."""
    common: set[str] | None = None
    for isa in cpuinfo.values("isa"):
        base, *multi = isa.lower().split("_")
        letters = set(base[4:]) if base.startswith(("rv64", "rv32")) else set()
        extensions = letters | set(multi)
        common = extensions if common is None else common & extensions
    return (common or set()) & set(RISCV_EXTENSIONS)


# The ELF auxiliary vector (/proc/self/auxv): what the kernel tells every process
# about its CPU, readable where /proc/cpuinfo is not. 64-bit little-endian pairs.
AT_HWCAP = 16
AT_HWCAP2 = 26
# arch/arm64/include/uapi/asm/hwcap.h
AARCH64_HWCAP_BITS = {
    "fp": 0, "asimd": 1, "fphp": 9, "asimdhp": 10, "asimddp": 20, "sve": 22, "asimdfhm": 23,
}  # fmt: skip
AARCH64_HWCAP2_BITS = {
    "sve2": 1, "svei8mm": 9, "svebf16": 12, "i8mm": 13, "bf16": 14, "sme": 23,
}  # fmt: skip


def parse_auxv(data: bytes | None) -> dict[int, int]:
    """auxv entries (type -> value); empty where missing or truncated."""
    entries: dict[int, int] = {}
    if not data:
        return entries
    for offset in range(0, len(data) - 15, 16):
        kind = int.from_bytes(data[offset : offset + 8], "little")
        value = int.from_bytes(data[offset + 8 : offset + 16], "little")
        if kind == 0:  # AT_NULL ends the vector
            break
        entries.setdefault(kind, value)
    return entries


def isa_from_hwcaps(auxv: dict[int, int], architecture: str) -> list[str] | None:
    """Flags the hwcaps state (aarch64 only: x86 hwcaps do not name AVX-512); None if none."""
    if architecture != "aarch64" or AT_HWCAP not in auxv:
        return None
    hwcap, hwcap2 = auxv.get(AT_HWCAP, 0), auxv.get(AT_HWCAP2, 0)
    found = {name for name, bit in AARCH64_HWCAP_BITS.items() if hwcap >> bit & 1}
    found |= {name for name, bit in AARCH64_HWCAP2_BITS.items() if hwcap2 >> bit & 1}
    if {"fphp", "asimdhp"} <= found:
        found.add("fp16")
    return sorted(found)
