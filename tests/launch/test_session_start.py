"""A session whose engines fail to start undoes what it started: no stage left, the guard left."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import psutil
import pytest

pytest.importorskip("vllm_omni", reason="the inference runtime is not installed")

from omni_cpu import envs
from omni_cpu.errors import StageError
from omni_cpu.launch import pipeline
from omni_cpu.launch.pipeline import PipelineSession
from omni_cpu.launch.plan import make_launch_plan


@pytest.fixture(autouse=True)
def process_state_restored():
    """Entering a session sets os.environ, the thread hook, warning filters and two events."""
    saved = dict(os.environ)
    hook = threading.excepthook
    started = pipeline.ENGINES_STARTED.is_set()
    with warnings.catch_warnings():
        yield
    os.environ.clear()
    os.environ.update(saved)
    threading.excepthook = hook
    if not started:
        pipeline.ENGINES_STARTED.clear()


def test_engines_failing_after_a_stage_started_leave_no_stage_and_the_guard_exited(
    tiny_checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vllm_omni.entrypoints import omni

    stages: list[subprocess.Popen] = []

    class OmniFailingAfterOneStage:
        """vLLM-Omni's engines, as far as one stage process and then a failure."""

        def __init__(self, **_: object) -> None:
            stages.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]))
            raise RuntimeError("Stage-1 failed to start")

    monkeypatch.setattr(omni, "Omni", OmniFailingAfterOneStage)
    monkeypatch.delenv(envs.OWNER.name, raising=False)
    session = PipelineSession(make_launch_plan(str(tiny_checkpoint)))
    with pytest.raises(StageError, match="starting the stage engines"):
        session.__enter__()
    assert not psutil.pid_exists(stages[0].pid)  # killed (and reaped) before the error came back
    assert envs.OWNER.name not in os.environ  # the guard was exited
    assert envs.STAGE_PROGRESS_DIR.name not in os.environ
    assert session._omni is None
