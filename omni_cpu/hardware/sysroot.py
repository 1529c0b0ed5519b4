"""One path context rooted at `/` or at a dump, as `lscpu --sysroot` reads one.

Every file the probe reads goes through `SysRoot`, so a dump of another machine
reads exactly as this one would. Readers are forgiving: a missing, unreadable
or odd file gives None (or an empty list), and the caller degrades one field.
"""

from __future__ import annotations

import os
from pathlib import Path

from omni_cpu.cpulist import parse_cpu_list
from omni_cpu.errors import CpuListError


class SysRoot:
    """Files of one machine, addressed by their absolute path on that machine."""

    def __init__(self, root: str | os.PathLike[str] = "/") -> None:
        self.root = Path(root)
        # "/" (however spelled) is this machine: only then may live-only facts
        # (affinity, libnuma, platform.machine) be read.
        self.is_live = self.root.resolve() == Path("/")

    def path(self, rel: str) -> Path:
        """The host path of `rel` (an absolute path on the probed machine)."""
        return self.root / rel.lstrip("/")

    def exists(self, rel: str) -> bool:
        try:
            return self.path(rel).exists()
        except OSError:
            return False

    def is_dir(self, rel: str) -> bool:
        try:
            return self.path(rel).is_dir()
        except OSError:
            return False

    def read_text(self, rel: str) -> str | None:
        """The file's text, or None where it is missing or unreadable."""
        try:
            # sysfs attributes are small; dumps sometimes carry NUL padding.
            return self.path(rel).read_text(errors="replace").replace("\x00", "")
        except (OSError, ValueError):
            return None

    def read_bytes(self, rel: str) -> bytes | None:
        """The file's bytes (binary procfs files such as auxv), or None."""
        try:
            return self.path(rel).read_bytes()
        except (OSError, ValueError):
            return None

    def read_line(self, rel: str) -> str | None:
        """The first line, stripped; None where missing."""
        text = self.read_text(rel)
        if text is None:
            return None
        return text.strip().split("\n", 1)[0].strip()

    def read_int(self, rel: str) -> int | None:
        """An integer attribute (decimal or 0x-hex); None where missing or odd."""
        line = self.read_line(rel)
        if not line:
            return None
        try:
            return int(line, 0)
        except ValueError:
            try:
                return int(line)
            except ValueError:
                return None

    def read_cpu_list(self, rel: str) -> tuple[int, ...] | None:
        """A kernel CPU list file (`0-3,8`); None where missing or unparsable."""
        line = self.read_line(rel)
        if line is None:
            return None
        try:
            return parse_cpu_list(line)
        except CpuListError:
            return None

    def read_cpu_mask(self, rel: str) -> tuple[int, ...] | None:
        """A kernel CPU mask file (`00000000,0000000f`); None where missing or odd."""
        line = self.read_line(rel)
        if line is None:
            return None
        return parse_cpu_mask(line)

    def read_link(self, rel: str) -> str | None:
        """Where a symbolic link points, as written (never followed); None where not a link."""
        try:
            return os.readlink(self.path(rel))
        except (OSError, ValueError):
            return None

    def listdir(self, rel: str) -> list[str]:
        """Names in a directory, sorted; empty where it is missing."""
        try:
            return sorted(os.listdir(self.path(rel)))
        except OSError:
            return []


def parse_cpu_mask(text: str) -> tuple[int, ...] | None:
    """Parse a comma-grouped hex CPU mask (`ff,00000001`) into CPU ids."""
    digits = text.strip().replace(",", "")
    if not digits:
        return ()
    try:
        value = int(digits, 16)
    except ValueError:
        return None
    cpus = []
    bit = 0
    while value:
        if value & 1:
            cpus.append(bit)
        value >>= 1
        bit += 1
    return tuple(cpus)


def numbered_entries(names: list[str], prefix: str) -> list[int]:
    """Ids of entries named `<prefix><N>` (cpu0, node3), sorted numerically."""
    ids = []
    for name in names:
        suffix = name[len(prefix) :]
        if name.startswith(prefix) and suffix.isdigit():
            ids.append(int(suffix))
    return sorted(ids)
