"""ARM implementer and part ids, decoded to names (as lscpu's ARM table does).

/proc/cpuinfo on ARM gives only numbers (`CPU implementer : 0x41`,
`CPU part : 0xd46`); these tables turn them into the names people know.
Sources: ARM Technical Reference Manuals (MIDR values), the kernel's
arch/arm64/include/asm/cputype.h.
"""

from __future__ import annotations

IMPLEMENTERS: dict[int, str] = {
    0x41: "ARM",
    0x42: "Broadcom",
    0x43: "Cavium",
    0x46: "FUJITSU",
    0x48: "HiSilicon",
    0x4E: "NVIDIA",
    0x50: "APM",
    0x51: "Qualcomm",
    0x53: "Samsung",
    0x56: "Marvell",
    0x61: "Apple",
    0x69: "Intel",
    0x6D: "Microsoft",
    0x70: "Phytium",
    0xC0: "Ampere",
}

# Parts by implementer. ARM Ltd's own cores are the ones CPU servers and phones use.
PARTS: dict[int, dict[int, str]] = {
    0x41: {
        0xC05: "Cortex-A5",
        0xC07: "Cortex-A7",
        0xC08: "Cortex-A8",
        0xC09: "Cortex-A9",
        0xC0D: "Cortex-A17",
        0xC0E: "Cortex-A17",
        0xC0F: "Cortex-A15",
        0xD01: "Cortex-A32",
        0xD03: "Cortex-A53",
        0xD04: "Cortex-A35",
        0xD05: "Cortex-A55",
        0xD06: "Cortex-A65",
        0xD07: "Cortex-A57",
        0xD08: "Cortex-A72",
        0xD09: "Cortex-A73",
        0xD0A: "Cortex-A75",
        0xD0B: "Cortex-A76",
        0xD0C: "Neoverse-N1",
        0xD0D: "Cortex-A77",
        0xD0E: "Cortex-A76AE",
        0xD40: "Neoverse-V1",
        0xD41: "Cortex-A78",
        0xD42: "Cortex-A78AE",
        0xD43: "Cortex-A65AE",
        0xD44: "Cortex-X1",
        0xD46: "Cortex-A510",
        0xD47: "Cortex-A710",
        0xD48: "Cortex-X2",
        0xD49: "Neoverse-N2",
        0xD4A: "Neoverse-E1",
        0xD4B: "Cortex-A78C",
        0xD4C: "Cortex-X1C",
        0xD4D: "Cortex-A715",
        0xD4E: "Cortex-X3",
        0xD4F: "Neoverse-V2",
        0xD80: "Cortex-A520",
        0xD81: "Cortex-A720",
        0xD82: "Cortex-X4",
        0xD84: "Neoverse-V3",
        0xD85: "Cortex-X925",
        0xD87: "Cortex-A725",
        0xD8E: "Neoverse-N3",
    },
    0x46: {0x001: "A64FX"},
    0x48: {0xD01: "Kunpeng-920"},
    0x4E: {0x000: "Denver", 0x003: "Denver 2", 0x004: "Carmel"},
    0x61: {
        0x022: "Icestorm-M1",
        0x023: "Firestorm-M1",
        0x032: "Blizzard-M2",
        0x033: "Avalanche-M2",
    },
    0xC0: {0xAC3: "Ampere-1", 0xAC4: "Ampere-1a"},
}


def parse_id(text: str | None) -> int | None:
    """`0x41` → 65; None where the text is not a hex id."""
    if not text or not text.lower().startswith("0x"):
        return None
    try:
        return int(text, 16)
    except ValueError:
        return None


def implementer_name(implementer: int | None) -> str | None:
    return IMPLEMENTERS.get(implementer) if implementer is not None else None


def part_name(implementer: int | None, part: int | None) -> str | None:
    if implementer is None or part is None:
        return None
    return PARTS.get(implementer, {}).get(part)
