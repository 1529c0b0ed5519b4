"""serve's /metrics: a streamed reply's first audio, safe start and gaps (ASGI messages in)."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import REGISTRY

from omni_cpu.serve.stream_metrics import StreamRecorder

FRAME_BYTES = 1920 * 2  # one 80 ms frame of 16-bit PCM at 24 kHz


def _sample(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _play(recorder: StreamRecorder, clock: Clock, chunks: list[tuple[float, int]], kind: bytes):
    sent = []

    async def send(message):
        sent.append(message)

    wrapped = recorder.wrap(send)

    async def reply():
        await wrapped(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", kind)]}
        )
        for index, (at, frames) in enumerate(chunks):
            clock.now = at
            header = b"RIFF" + b"\0" * 40 if kind == b"audio/wav" and index == 0 else b""
            await wrapped(
                {
                    "type": "http.response.body",
                    "body": header + b"\0" * (frames * FRAME_BYTES),
                    "more_body": index < len(chunks) - 1,
                }
            )

    asyncio.run(reply())
    return sent


def test_a_gappy_pcm_stream_is_observed_with_its_safe_start_and_its_stall() -> None:
    stalled = _sample("omni_cpu_streams_stalled_total")
    safe_sum = _sample("omni_cpu_stream_safe_start_seconds_sum")
    stall_sum = _sample("omni_cpu_stream_stall_seconds_sum")
    clock = Clock()
    recorder = StreamRecorder(clock=clock)
    sent = _play(recorder, clock, [(0.4, 1), (1.3, 10), (2.0, 10)], b"audio/pcm")
    assert len(sent) == 4  # every message still goes out
    assert recorder.trace.chunk_samples == [1920, 19200, 19200]
    # 0.4, 1.3 - 0.08, 2.0 - 0.88: safe start 1.22 s; a player at 0.65 s waits 0.57 s.
    assert _sample("omni_cpu_stream_safe_start_seconds_sum") - safe_sum == pytest.approx(1.22)
    assert _sample("omni_cpu_stream_stall_seconds_sum") - stall_sum == pytest.approx(0.57)
    assert _sample("omni_cpu_streams_stalled_total") - stalled == 1


def test_a_wav_stream_counts_audio_after_its_header_and_a_fed_stream_does_not_stall() -> None:
    stalled = _sample("omni_cpu_streams_stalled_total")
    clock = Clock()
    recorder = StreamRecorder(clock=clock)
    _play(recorder, clock, [(0.3, 1), (0.35, 10), (1.0, 10)], b"audio/wav")
    assert recorder.trace.chunk_samples == [1920, 19200, 19200]
    assert recorder.trace.safe_start_s == pytest.approx(0.3)
    assert _sample("omni_cpu_streams_stalled_total") == stalled


def test_an_error_reply_is_not_a_stream() -> None:
    count = _sample("omni_cpu_stream_first_audio_seconds_count")
    recorder = StreamRecorder()

    async def reply():
        await recorder.wrap(_ignore)({"type": "http.response.start", "status": 400, "headers": []})
        await recorder.wrap(_ignore)({"type": "http.response.body", "body": b"{}"})

    asyncio.run(reply())
    assert recorder.trace.chunk_samples == []
    assert _sample("omni_cpu_stream_first_audio_seconds_count") == count


async def _ignore(message) -> None:
    return None
