"""Engines started once, then any number of request batches, each timed chunk by chunk.

`PipelineSession` (omni_cpu.launch.pipeline) keeps the engines up across
batches and hands every audio chunk to a callback; a benchmark only needs the
arrival times and sizes, so it records those instead of writing WAV files.
"""

from __future__ import annotations

from typing import Any

from omni_cpu.launch.pipeline import PipelineSession
from omni_cpu.speech.playback import StreamTrace
from omni_cpu.speech.request import SpeechRequest


class EngineSession(PipelineSession):
    """Both stages of one launch plan, up for the life of a `with` block."""

    def __enter__(self) -> EngineSession:
        super().__enter__()
        return self

    def stream_batch(self, requests: list[SpeechRequest]) -> tuple[list[StreamTrace], float]:
        """Submit `requests` at once in streaming mode; each one's chunk times, and the wall."""
        traces = [StreamTrace() for _ in requests]

        def record(index: int, audio: Any, seconds: float) -> None:
            traces[index].add(seconds, int(audio.size))

        wall_s = self.generate(requests, stream=True, on_chunk=record)
        return traces, wall_s
