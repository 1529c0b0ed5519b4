"""A reader that goes away (`omni-cpu probe | head`) is not an error: no message, and the
command's own exit code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers.machines import FakeMachine

REPO = Path(__file__).resolve().parent.parent
GIB_KIB = 1024 * 1024


def _probe_with_stdout_closed(root: Path, *args: str) -> tuple[int, str]:
    """Run probe with its stdout a pipe whose reading end is closed before it writes."""
    process = subprocess.Popen(
        [sys.executable, "-m", "omni_cpu.cli", "probe", "--sysroot", str(root), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
        text=True,
    )
    assert process.stdout is not None
    process.stdout.close()
    _, stderr = process.communicate(timeout=120)
    return process.returncode, stderr


def _machine(root: Path, memory_gib: int) -> Path:
    machine = FakeMachine(root).cpus(online=list(range(8)))
    machine.node(0, "0-7", memory_kib=memory_gib * GIB_KIB)
    return machine.meminfo(total_kib=memory_gib * GIB_KIB, available_kib=memory_gib * GIB_KIB).root


def test_closed_stdout_of_the_table_exits_0_quietly(tmp_path):
    assert _probe_with_stdout_closed(_machine(tmp_path, 32)) == (0, "")


def test_closed_stdout_of_the_json_exits_0_quietly(tmp_path):
    assert _probe_with_stdout_closed(_machine(tmp_path, 32), "--json") == (0, "")


def test_closed_stdout_keeps_a_refusals_exit_code_and_its_one_line(tmp_path):
    code, stderr = _probe_with_stdout_closed(_machine(tmp_path, 2))
    assert code == 5
    assert len(stderr.strip().splitlines()) == 1
