"""Real machines' sysfs/procfs dumps (tests/data/sysroots), unpacked for tests.

`manifest.json` there says what lscpu reports for each dump; the folder's README
says where each came from and its licence.
"""

from __future__ import annotations

import json
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
SYSROOTS_DIR = REPO_ROOT / "tests" / "data" / "sysroots"
MANIFEST = SYSROOTS_DIR / "manifest.json"


@dataclass(frozen=True)
class Dump:
    """One dump as the manifest describes it."""

    id: str
    tarball: Path
    expected: dict[str, Any]


def load_dumps() -> list[Dump]:
    """Every dump the manifest lists."""
    manifest = json.loads(MANIFEST.read_text())
    return [
        Dump(id=entry["id"], tarball=SYSROOTS_DIR / entry["tarball"], expected=entry)
        for entry in manifest["dumps"]
    ]


# Per-CPU trees the probe never reads; they are 90 % of a big dump's files, and
# creating them dominated the suite's time.
SKIPPED_PARTS = frozenset({"cache", "cpuidle", "power", "hotplug", "microcode"})


def unpack(tarball: Path, destination: Path) -> Path:
    """Unpack a dump (minus SKIPPED_PARTS); return the folder holding proc/ and sys/."""
    destination.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tarball) as archive:
        members = [m for m in archive.getmembers() if not SKIPPED_PARTS & set(m.name.split("/"))]
        if hasattr(tarfile, "data_filter"):
            archive.extractall(destination, members=members, filter="data")
        else:  # Python < 3.11.4: the dumps are plain files and folders
            archive.extractall(destination, members=members)
    return find_root(destination)


def find_root(folder: Path, max_depth: int = 3) -> Path:
    """The top-most folder at or under `folder` that holds proc/ or sys/."""
    level = [folder]
    for _ in range(max_depth + 1):
        for path in level:
            if (path / "proc").is_dir() or (path / "sys").is_dir():
                return path
        level = sorted(child for path in level for child in path.iterdir() if child.is_dir())
    raise FileNotFoundError(f"no proc/ or sys/ under {folder}")
