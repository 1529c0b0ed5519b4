"""/proc/cpuinfo, parsed once into plain data.

The file differs by architecture: x86 and ARM repeat one block per CPU,
s390 writes one header block plus `processor N:` lines, sparc writes a single
block, old ARM kernels put `Features`/`CPU part` after the per-CPU blocks. The
parser keeps per-CPU blocks by their `processor` number and merges every other
line into `common` (first value wins, as lscpu's lookup does).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class CpuInfo:
    """Keys are lower-cased; values are stripped text."""

    common: dict[str, str] = field(default_factory=dict)
    processors: dict[int, dict[str, str]] = field(default_factory=dict)

    def get(self, cpu: int | None, key: str) -> str | None:
        """A key for one CPU, falling back to the lines shared by all CPUs."""
        if cpu is not None and key in self.processors.get(cpu, {}):
            return self.processors[cpu][key]
        return self.common.get(key)

    def first(self, key: str) -> str | None:
        """A key from the first CPU that has it, else from the shared lines."""
        for block in self.processors.values():
            if key in block:
                return block[key]
        return self.common.get(key)

    def values(self, key: str) -> list[str]:
        """Every CPU's value of a key (the shared value where none has its own)."""
        found = [block[key] for block in self.processors.values() if key in block]
        if not found and key in self.common:
            found = [self.common[key]]
        return found


def parse_cpuinfo(text: str | None) -> CpuInfo:
    """Parse /proc/cpuinfo text; None or garbage gives an empty CpuInfo."""
    info = CpuInfo()
    if not text:
        return info
    for block_text in text.split("\n\n"):
        block: dict[str, str] = {}
        for line in block_text.splitlines():
            key, sep, value = line.partition(":")
            if not sep:
                continue
            key = key.strip().lower()
            value = value.strip()
            if not key:
                continue
            if key == "processor" and not value.isdigit():
                # Old ARM kernels: "Processor : ARMv7 Processor rev 4 (v7l)".
                key = "processor name"
            block.setdefault(key, value)
        processor = block.get("processor")
        if processor is not None and processor.isdigit():
            info.processors.setdefault(int(processor), {}).update(block)
        else:
            for key, value in block.items():
                info.common.setdefault(key, value)
    return info


def cpu_number(cpuinfo: CpuInfo, key: str) -> int | None:
    """A whole-number field of the first CPU stating it (x86's `cpu family`, `model`), decimal
    as x86 kernels write it; None where absent or not a number (other architectures' `model`
    is text, or absent)."""
    value = cpuinfo.first(key)
    return int(value) if value is not None and value.isdigit() else None
