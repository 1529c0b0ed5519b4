"""scripts/setup.sh skips the install where .venv is current, so offline re-runs work.

It runs here on a copy of the files it reads, with a stand-in .venv whose python and
runtime installer only note that they were called: what is asserted is whether the
install ran, not what it installed.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from tests.helpers.cli import REPO


def _executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _tree(root: Path) -> Path:
    """setup.sh's inputs, a runtime installer and a .venv that log each call to calls.log."""
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    shutil.copytree(REPO / "requirements", root / "requirements")
    (root / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "setup.sh", root / "scripts" / "setup.sh")
    log = root / "calls.log"
    _executable(root / "scripts" / "install-runtime.sh", f'echo runtime >>"{log}"\n')
    _executable(root / ".venv" / "bin" / "python", f'#!/bin/sh\necho "python $*" >>"{log}"\n')
    _executable(root / ".venv" / "bin" / "omni-cpu", "#!/bin/sh\n")
    return log


def _setup(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": sys.executable}
    env.pop("OMNI_CPU_PROBE_ONLY", None)
    return subprocess.run(
        ["bash", str(root / "scripts" / "setup.sh")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def _calls(log: Path) -> list[str]:
    calls = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return calls


def test_a_current_venv_skips_the_install_and_a_changed_requirement_installs_again(
    tmp_path: Path,
) -> None:
    log = _tree(tmp_path)
    first = _setup(tmp_path)
    assert first.returncode == 0, first.stderr
    calls = _calls(log)
    assert any("pip install" in call for call in calls) and "runtime" in calls

    again = _setup(tmp_path)
    assert again.returncode == 0, again.stderr
    assert _calls(log) == []  # nothing installed: works with no network
    assert "install skipped" in again.stdout

    with (tmp_path / "requirements" / "runtime.txt").open("a") as pins:
        pins.write("# a new pin\n")
    changed = _setup(tmp_path)
    assert changed.returncode == 0, changed.stderr
    assert "runtime" in _calls(log) and "install skipped" not in changed.stdout


def test_a_failed_install_leaves_no_stamp_to_skip_the_next_one(tmp_path: Path) -> None:
    log = _tree(tmp_path)
    _executable(tmp_path / "scripts" / "install-runtime.sh", f'echo runtime >>"{log}"\nexit 1\n')
    assert _setup(tmp_path).returncode != 0
    _calls(log)
    assert _setup(tmp_path).returncode != 0
    assert "runtime" in _calls(log)  # tried again, not skipped
