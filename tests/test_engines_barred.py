"""Only tests marked e2e start stage engines, so `make test-fast` starts none.

tests/conftest.py names a file in OMNI_CPU_ENGINES_BARRED for the session and keeps
it in place while a test without the e2e marker runs; a stage worker that starts
then writes its pid into it and fails (tests/platforms/test_engines_barred.py),
and the test fails at teardown whatever it asserted.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from omni_cpu import envs
from tests.helpers.cli import REPO

ENGINES_BARRED_ENV = envs.ENGINES_BARRED.name


def test_the_bar_is_up_while_a_test_without_the_marker_runs() -> None:
    assert Path(os.environ[ENGINES_BARRED_ENV]).exists()


@pytest.mark.e2e
def test_the_bar_is_down_while_an_e2e_test_runs() -> None:
    assert not Path(os.environ[ENGINES_BARRED_ENV]).exists()


INNER_CONFTEST = (
    "from tests.conftest import (\n"
    "    pytest_configure, pytest_runtest_setup, pytest_runtest_teardown, pytest_unconfigure\n"
    ")\n"
)
# What a stage worker does while the bar is up (omni_cpu.platform.workers), in a test
# that then passes anyway, as one expecting the run to fail would.
INNER_TEST = """
import os
import pytest

def start_a_stage_engine():
    bar = os.environ["OMNI_CPU_ENGINES_BARRED"]
    if os.path.exists(bar):
        with open(bar, "a") as sink:
            sink.write(f"{os.getpid()}\\n")

def test_unmarked():
    start_a_stage_engine()

@pytest.mark.e2e
def test_marked():
    start_a_stage_engine()
"""


def test_only_the_test_without_the_marker_that_started_an_engine_fails(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(INNER_CONFTEST)
    (tmp_path / "test_inner.py").write_text(INNER_TEST)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
    )
    assert done.returncode == 1, done.stdout[-3000:]
    assert "PASSED test_inner.py::test_marked" in done.stdout
    assert "ERROR test_inner.py::test_unmarked" in done.stdout
    assert "mark it @pytest.mark.e2e" in done.stdout
