"""`omni-cpu` as a subprocess of this interpreter, from the repository root."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def omni_cpu(
    *args: str, env: dict[str, str] | None = None, timeout_s: float = 120
) -> subprocess.CompletedProcess[str]:
    """`python -m omni_cpu.cli ARGS`, its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "omni_cpu.cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=timeout_s,
    )
