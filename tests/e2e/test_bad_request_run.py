"""A request the talker's engine refuses fails alone: the engines go on and the next one speaks.

Real engines on the tiny checkpoint, through the session `run`, `bench` and `serve`'s own
engines share. The request's talker top_p is set the way vLLM-Omni's speech route sets a
request's `extra_params` (by setattr, unchecked) to 1e-310, which the stage, flushing
subnormals, reads as 0 and vLLM's decoder refuses: that used to kill the engine core's input
thread, so the next request never got an answer.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

pytest.importorskip("vllm_omni", reason="the inference runtime is not installed")

from omni_cpu.errors import StageError
from omni_cpu.launch import pipeline
from omni_cpu.launch.pipeline import PipelineSession
from omni_cpu.launch.plan import make_launch_plan
from omni_cpu.speech.request import SpeechRequest
from tests.helpers.audio import FRAME
from tests.helpers.engines import needs_runtime

FRAMES = 6


@pytest.fixture
def process_state_restored():
    """A session sets os.environ and the thread hook for its life."""
    saved = dict(os.environ)
    hook = threading.excepthook
    yield
    os.environ.clear()
    os.environ.update(saved)
    threading.excepthook = hook


@pytest.mark.e2e
@needs_runtime
def test_a_request_the_engine_refuses_fails_alone_and_the_next_one_speaks(
    tiny_checkpoint: Path, monkeypatch: pytest.MonkeyPatch, process_state_restored: None
) -> None:
    own = pipeline._sampling_params

    def subnormal_top_p(omni: object, requests: list, stream: bool) -> list:
        params = own(omni, requests, stream)
        params[0].top_p = 1e-310  # as vLLM-Omni's speech route copies extra_params.top_p
        return params

    request = SpeechRequest(text="Hello there.", speaker="ryan", max_frames=FRAMES)
    samples: list[int] = []
    with PipelineSession(make_launch_plan(str(tiny_checkpoint))) as session:
        monkeypatch.setattr(pipeline, "_sampling_params", subnormal_top_p)
        with pytest.raises(StageError):
            session.generate([request], stream=True, on_chunk=lambda *_: None)
        monkeypatch.setattr(pipeline, "_sampling_params", own)
        session.generate(
            [request], stream=True, on_chunk=lambda _, audio, __: samples.append(audio.size)
        )
    assert sum(samples) == FRAMES * FRAME
