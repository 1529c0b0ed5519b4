"""A client that stops taking a reply's data is let go: its stream cut, its place returned.

The client's `send` blocks as uvicorn's does when the socket's buffer is full and the
client reads nothing; past the send timeout admission cuts the stream, counts it,
and the next client gets the place a reader that never reads would have held.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from omni_cpu.serve.knobs import AdmissionLimits

pytest.importorskip("prometheus_client")
from prometheus_client import REGISTRY

from omni_cpu.serve.admission import SpeechAdmission
from tests.serve.test_admission import SPEECH, SlowApp, call
from tests.serve.test_stream_guard import STREAM

STREAMED = {**SPEECH, "stream": True, "response_format": "pcm"}


class StreamingApp:
    """Stands in for vLLM-Omni streaming audio: chunk after chunk, as long as it may."""

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for _ in range(1000):
            await send({"type": "http.response.body", "body": b"\0" * 3840, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def slow_reader_cuts() -> float:
    value = REGISTRY.get_sample_value(
        "omni_cpu_speech_requests_rejected_total", {"reason": "slow_reader"}
    )
    return value or 0.0


async def never_reads(app: Any) -> None:
    """A streamed request whose client takes the headers and then no data at all."""
    body = json.dumps(STREAMED).encode()
    stuck = asyncio.Event()

    async def receive() -> dict:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict) -> None:
        if message.get("body"):
            await stuck.wait()  # the socket's buffer is full

    scope = {"type": "http", "path": "/v1/audio/speech", "method": "POST", "headers": []}
    await app(scope, receive, send)


def test_a_reader_that_never_reads_is_cut_and_its_place_goes_to_the_next_client():
    app = SpeechAdmission(StreamingApp(), AdmissionLimits(max_in_flight=1, send_timeout_s=0.5))
    before = slow_reader_cuts()

    async def scenario() -> tuple[float, int]:
        started = time.monotonic()
        reader = asyncio.create_task(never_reads(app))
        await asyncio.sleep(0.2)
        assert app.in_flight == 1
        await asyncio.wait_for(reader, 5)
        app.app = SlowApp(released=True)
        status, _ = await call(app, "/v1/audio/speech", SPEECH)
        return time.monotonic() - started, status

    seconds, status = asyncio.run(scenario())
    assert seconds < 3 and status == 200
    assert app.in_flight == 0 and app.on_client == 0
    assert slow_reader_cuts() == before + 1


def test_without_a_send_timeout_the_reader_keeps_its_place():
    app = SpeechAdmission(StreamingApp(), AdmissionLimits(max_in_flight=1, send_timeout_s=0))

    async def scenario() -> int:
        reader = asyncio.create_task(never_reads(app))
        await asyncio.sleep(1.0)
        held = app.in_flight
        reader.cancel()
        return held

    assert asyncio.run(scenario()) == 1


class SpeakingHandler:
    """Stands in for vLLM-Omni's WebSocket handler: audio for every text it is sent."""

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "websocket.accept"})
        while (await receive())["type"] != "websocket.disconnect":
            for _ in range(100):
                await send({"type": "websocket.send", "bytes": b"\0" * 3840})


def test_a_websocket_client_that_never_reads_loses_its_session_and_place():
    app = SpeechAdmission(SpeakingHandler(), AdmissionLimits(send_timeout_s=0.5))
    inbox = [
        {"type": "websocket.connect"},
        {"type": "websocket.receive", "text": json.dumps({"type": "input.text", "text": "Hi."})},
    ]
    stuck = asyncio.Event()

    async def receive() -> dict:
        if inbox:
            return inbox.pop(0)
        await stuck.wait()
        return {"type": "websocket.disconnect"}

    async def send(message: dict) -> None:
        if message["type"] == "websocket.send":
            await stuck.wait()

    scope = {"type": "websocket", "path": STREAM, "headers": []}
    started = time.monotonic()
    asyncio.run(asyncio.wait_for(app(scope, receive, send), 5))
    assert time.monotonic() - started < 3 and app.in_flight == 0
