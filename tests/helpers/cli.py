"""`omni-cpu` as a subprocess of this interpreter (from the repository root), or in this process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

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


def exit_code(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    """`omni-cpu ARGS` run in this process (sys.argv patched): the code it exits with."""
    from omni_cpu.cli import main

    monkeypatch.setattr(sys, "argv", ["omni-cpu", *args])
    try:
        main()
    except SystemExit as done:
        return int(done.code or 0)
    return 0
