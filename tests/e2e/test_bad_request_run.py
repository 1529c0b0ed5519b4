"""A request the talker's engine refuses fails alone: the engines go on and the next one speaks.

Real engines on the tiny checkpoint, through the session `run`, `bench` and `tune` share, in a
fresh interpreter (tests/e2e/bad_request_driver.py). The request's talker top_p is set the way
vLLM-Omni's speech route sets a request's `extra_params` (by setattr, unchecked) to 1e-310,
which the stage, flushing subnormals, reads as 0 and vLLM's decoder refuses: that used to kill
the engine core's input thread, so the next request never got an answer.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.audio import FRAME
from tests.helpers.engines import needs_runtime

FRAMES = 6
DRIVER = Path(__file__).with_name("bad_request_driver.py")
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.e2e
@needs_runtime
def test_a_request_the_engine_refuses_fails_alone_and_the_next_one_speaks(
    tiny_checkpoint: Path,
) -> None:
    # The stall watch stays off: the failed request must end by its own error, not by a hang
    # the watch calls after its stall time.
    env = {**os.environ, "OMNI_CPU_STAGE_STALL_S": "0", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, str(DRIVER), str(tiny_checkpoint), str(FRAMES)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines() if ": " in line)
    assert "Stage request failed" in lines.get("first", ""), done.stdout
    assert lines.get("second") == str(FRAMES * FRAME), done.stdout
