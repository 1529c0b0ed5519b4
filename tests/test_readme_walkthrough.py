"""README's example block runs as written, top to bottom, in a fresh folder after `make demo`.

The commands that start engines (run, serve, tune) run as their --dry-run: everything
is checked and planned, nothing starts; bench and check-weights (no dry run) and doctor
(the runtime's own check) are left to the e2e tests. The folder holds what a clone
does (profiles/, tests/) and what `make demo` leaves (checkpoints/tiny).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.cli import REPO
from tests.test_docs import omni_cpu_commands

DRY_RUN = {"run", "serve", "tune"}
LEFT_TO_E2E = {"bench", "check-weights", "doctor"}
# diff exits as diff(1) does: 1 where the two profiles differ, as a shipped one and this
# machine's will.
EXIT_CODES = {"diff": {0, 1}}


def example_block() -> list[list[str]]:
    """The `omni-cpu` commands of README's "One example each" block, in order."""
    text = (REPO / "README.md").read_text()
    after = text.split("One example each", 1)[1]
    block = after[after.index("```") : after.index("```", after.index("```") + 3) + 3]
    return omni_cpu_commands(block)


def test_the_readme_examples_run_as_written_after_make_demo(tmp_path: Path) -> None:
    for shipped in ("profiles", "tests"):
        (tmp_path / shipped).symlink_to(REPO / shipped)
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "COLUMNS": "120"}

    def omni_cpu(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "omni_cpu.cli", *args],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=300,
        )

    demo = omni_cpu("make-checkpoint", "--size", "tiny", "--out", "checkpoints/tiny")
    assert demo.returncode == 0, demo.stderr  # what make demo leaves
    commands = example_block()
    assert {args[0] for args in commands} >= DRY_RUN | {"probe", "make-checkpoint", "profile"}
    for args in commands:
        if args[0] in LEFT_TO_E2E:
            continue
        done = omni_cpu(*args, *(["--dry-run"] if args[0] in DRY_RUN else []))
        allowed = EXIT_CODES.get(args[0], {0})
        assert done.returncode in allowed, f"omni-cpu {' '.join(args)}: {done.stderr}"
        assert "Traceback" not in done.stderr
    assert (tmp_path / "deploy.yaml").is_file() and (tmp_path / "new.yaml").is_file()
