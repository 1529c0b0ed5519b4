"""The machine's architecture name (`uname -m` style), from a dump or the live box.

A dump has no uname. The kernel writes the name to /proc/sys/kernel/arch
(Linux 5.x and later), which a dump may carry; otherwise the name is derived
from what /proc/cpuinfo looks like on each architecture.
"""

from __future__ import annotations

import platform
import re

from omni_cpu.hardware.cpuinfo import CpuInfo
from omni_cpu.hardware.sysroot import SysRoot

# A 32-bit ARM kernel names the core's profile in "(v7l)" at the end of the
# processor / model name line; uname -m prints the same text (armv7l).
_ARM32_SUFFIX = re.compile(r"\((v\d+\w*)\)\s*$")

# Among 64-bit POWER, big-endian Linux is what POWER7 and earlier ran; POWER8
# and later are in practice little-endian. cpuinfo cannot say which, so this
# is a stated guess for dumps without /sys/kernel/cpu_byteorder.
_POWER_GENERATION = re.compile(r"POWER(\d+)", re.IGNORECASE)


def read_architecture(sysroot: SysRoot, cpuinfo: CpuInfo) -> str:
    """uname -m of the probed machine; "unknown" where nothing says."""
    if sysroot.is_live:
        return platform.machine() or "unknown"
    stated = sysroot.read_line("/proc/sys/kernel/arch")
    if stated:
        return stated
    architecture = architecture_from_cpuinfo(cpuinfo)
    if architecture.startswith("ppc64"):
        # The kernel states its byte order here (Linux 5.x+), which cpuinfo cannot.
        byte_order = sysroot.read_line("/sys/kernel/cpu_byteorder")
        if byte_order in ("little", "big"):
            return "ppc64le" if byte_order == "little" else "ppc64"
    return architecture


# Kernels that name their architecture in cpuinfo itself (ia64 writes `arch : IA-64`,
# alpha `cpu : Alpha`), as uname -m prints it.
_STATED_ARCH = {"ia-64": "ia64"}


def architecture_from_cpuinfo(info: CpuInfo) -> str:
    """Derive uname -m from the shape of /proc/cpuinfo."""
    stated = (info.first("arch") or "").strip().lower()
    if stated in _STATED_ARCH:
        return _STATED_ARCH[stated]
    if (info.first("cpu") or "").lower() == "alpha":
        return "alpha"
    vendor = info.first("vendor_id") or ""
    flags = f" {info.first('flags') or ''} "
    features = f" {info.first('features') or ''} "
    if vendor.startswith("IBM/S390"):
        return "s390x" if " zarch " in features else "s390"
    if info.first("flags") is not None and vendor:
        return "x86_64" if " lm " in flags else "i686"
    isa = (info.first("isa") or "").lower()
    if isa.startswith("rv64"):
        return "riscv64"
    if isa.startswith("rv32"):
        return "riscv32"
    if "loongarch64" in isa or (info.first("cpu family") or "").startswith("Loongson-64"):
        return "loongarch64"
    arm = _arm_architecture(info)
    if arm:
        return arm
    cpu = info.first("cpu") or ""
    machine_type = info.first("type") or ""
    if machine_type.startswith("sun4") or "sparc" in cpu.lower():
        return "sparc64" if machine_type.startswith(("sun4u", "sun4v")) else "sparc"
    if info.first("platform") or info.first("timebase"):
        return _powerpc_architecture(info, cpu)
    if (info.first("cpu model") or "").upper().startswith("MIPS"):
        return "mips64" if "64" in (info.first("isa") or "") else "mips"
    return "unknown"


def _arm_architecture(info: CpuInfo) -> str | None:
    if info.first("cpu implementer") is None and info.first("cpu architecture") is None:
        return None
    for key in ("processor name", "model name"):
        match = _ARM32_SUFFIX.search(info.first(key) or "")
        if match:
            return f"arm{match.group(1)}"
    arch_text = info.first("cpu architecture") or ""
    features = f" {info.first('features') or ''} "
    if arch_text.startswith("8") or arch_text.lower() == "aarch64":
        # A 64-bit kernel lists asimd; a 32-bit kernel on ARMv8 lists neon/vfp.
        return "aarch64" if " asimd " in features or " fp " in features else "armv8l"
    if arch_text.isdigit():
        return f"armv{arch_text}l"
    return "arm"


def _powerpc_architecture(info: CpuInfo, cpu: str) -> str:
    match = _POWER_GENERATION.search(cpu)
    platform_name = info.first("platform") or ""
    if match:
        return "ppc64le" if int(match.group(1)) >= 8 else "ppc64"
    if platform_name in ("pSeries", "PowerNV") or cpu.startswith(("PPC970", "Cell")):
        return "ppc64"
    return "ppc"
