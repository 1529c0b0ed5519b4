"""Find the libraries worth preloading into stage processes (Intel OpenMP, tcmalloc).

Read relative to the same root as the other facts, so a sysroot dump (which has
no libraries) simply finds none.
"""

from __future__ import annotations

import sys
from pathlib import Path

from omni_cpu.hardware.facts import INTEL_OPENMP, TCMALLOC

# Where distributions and pip wheels (intel-openmp, the venv) put them.
_LIBRARY_DIRS = (
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "usr/lib64",
    "usr/lib",
    "usr/local/lib",
    "lib/x86_64-linux-gnu",
    "lib64",
)


def _candidate_dirs(root: Path) -> list[Path]:
    dirs = [root / rel for rel in _LIBRARY_DIRS]
    if root == Path("/"):
        # The running interpreter's environment (pip's intel-openmp lands in <venv>/lib).
        dirs.insert(0, Path(sys.prefix) / "lib")
    return dirs


def find_library(names: tuple[str, ...], root: str | Path = "/") -> str | None:
    """The first existing file among `names` in the usual library folders, or None."""
    root = Path(root)
    for folder in _candidate_dirs(root):
        for name in names:
            candidate = folder / name
            if candidate.is_file():
                return str(candidate)
    return None


def find_preload_libraries(root: str | Path = "/") -> tuple[str, ...]:
    """Intel OpenMP and tcmalloc, in LD_PRELOAD order, where found."""
    found = (find_library(INTEL_OPENMP, root), find_library(TCMALLOC, root))
    return tuple(path for path in found if path)
