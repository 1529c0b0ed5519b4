"""The WebSocket guard as ASGI sees it: places per utterance, refusals as close codes."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import pytest

from omni_cpu.serve.knobs import AdmissionLimits

pytest.importorskip("prometheus_client")
from omni_cpu.serve.admission import SpeechAdmission

STREAM = "/v1/audio/speech/stream"


class Handler:
    """Stands in for vLLM-Omni's streaming handler: audio and session.done per input.done."""

    def __init__(self) -> None:
        self.in_flight_seen: list[int] = []
        self.gate: SpeechAdmission | None = None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            fields = json.loads(message["text"])
            if fields["type"] == "input.done":
                assert self.gate is not None
                start = {"type": "audio.start", "sentence_text": "say session.done twice"}
                await send({"type": "websocket.send", "text": json.dumps(start)})
                await send({"type": "websocket.send", "bytes": b"\0\0" * 1920})
                self.in_flight_seen.append(self.gate.in_flight)  # the audio is still going
                await send({"type": "websocket.send", "text": '{"type": "session.done"}'})


class Client:
    """Feeds a session's messages, then waits; records what the server sent."""

    def __init__(self, messages: list[dict]) -> None:
        self.inbox = [{"type": "websocket.connect"}] + [
            {"type": "websocket.receive", "text": json.dumps(m)} for m in messages
        ]
        self.sent: list[dict] = []

    async def receive(self) -> dict:
        if self.inbox:
            return self.inbox.pop(0)
        await asyncio.sleep(0.3)
        return {"type": "websocket.disconnect", "code": 1000}

    async def send(self, message: dict) -> None:
        self.sent.append(message)

    def closed(self) -> tuple[int, str] | None:
        closes = [m for m in self.sent if m["type"] == "websocket.close"]
        return (closes[0]["code"], closes[0]["reason"]) if closes else None


def session(app: SpeechAdmission, messages: list[dict]) -> Client:
    client = Client(messages)
    scope = {"type": "websocket", "path": STREAM, "headers": []}
    asyncio.run(asyncio.wait_for(app(scope, client.receive, client.send), 10))
    return client


CONFIG = {"type": "session.config", "model": "m", "voice": "ryan"}
UTTERANCE = [{"type": "input.text", "text": "Hello."}, {"type": "input.done"}]


def test_an_utterance_holds_one_place_until_its_session_done():
    handler = Handler()
    app = SpeechAdmission(handler, AdmissionLimits(max_in_flight=1))
    handler.gate = app
    client = session(app, [CONFIG, *UTTERANCE, *UTTERANCE])
    assert handler.in_flight_seen == [1, 1]  # the second came after the first's place freed
    assert app.in_flight == 0 and client.closed() is None


def test_an_utterance_past_the_limit_is_closed_1013():
    handler = Handler()
    app = SpeechAdmission(handler, AdmissionLimits(max_in_flight=1))
    handler.gate = app
    app.in_flight = 1  # another request holds the only place
    client = session(app, [CONFIG, *UTTERANCE])
    code, reason = client.closed() or (None, "")
    assert code == 1013 and "capacity" in reason and handler.in_flight_seen == []


def test_a_config_naming_a_url_is_closed_1008_with_the_reason():
    handler = Handler()
    app = SpeechAdmission(handler, AdmissionLimits())
    handler.gate = app
    client = session(app, [{**CONFIG, "ref_audio": "http://127.0.0.1:9/v.wav"}])
    code, reason = client.closed() or (None, "")
    assert code == 1008 and "URLs" in reason and len(reason.encode()) <= 123


def test_a_session_while_draining_is_closed_1012(tmp_path: Path):
    flag = tmp_path / "draining"
    flag.touch()
    handler = Handler()
    app = SpeechAdmission(handler, AdmissionLimits(drain_file=str(flag)))
    client = session(app, [CONFIG])
    code, reason = client.closed() or (None, "")
    assert code == 1012 and "draining" in reason


class AnswersTheCut(Handler):
    """vLLM-Omni's handler on a cut: an error, audio.done, session.done and another error."""

    def __init__(self) -> None:
        super().__init__()
        self.in_flight_after_cut: list[int] = []

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        except Exception:
            assert self.gate is not None
            self.in_flight_after_cut.append(self.gate.in_flight)
            for kind in ("error", "audio.done", "session.done", "error"):
                with contextlib.suppress(Exception):
                    await send({"type": "websocket.send", "text": json.dumps({"type": kind})})


class NeverReads(Client):
    """Takes the accept, then never takes another message: each send waits forever."""

    def __init__(self, messages: list[dict]) -> None:
        super().__init__(messages)
        self.jammed_sends = 0

    async def receive(self) -> dict:
        if self.inbox:
            return self.inbox.pop(0)
        await asyncio.Event().wait()  # the client neither reads nor leaves
        raise AssertionError("unreachable")

    async def send(self, message: dict) -> None:
        if message["type"] == "websocket.accept":
            return await super().send(message)
        self.jammed_sends += 1
        await asyncio.Event().wait()


def test_a_client_that_never_reads_is_cut_once_and_its_place_goes_back_at_the_cut():
    handler = AnswersTheCut()
    app = SpeechAdmission(handler, AdmissionLimits(max_in_flight=1, send_timeout_s=0.2))
    handler.gate = app
    client = NeverReads([CONFIG, *UTTERANCE])
    scope = {"type": "websocket", "path": STREAM, "headers": []}
    asyncio.run(asyncio.wait_for(app(scope, client.receive, client.send), 10))
    assert client.jammed_sends == 1  # the handler's four answers to the cut waited on nothing
    assert handler.in_flight_after_cut == [0] and app.in_flight == 0


def test_a_binary_frame_is_closed_1003_before_the_handler_reads_it():
    handler = Handler()
    app = SpeechAdmission(handler, AdmissionLimits())
    handler.gate = app
    client = Client([CONFIG])
    client.inbox.append({"type": "websocket.receive", "bytes": b"\x00\x01"})
    asyncio.run(
        asyncio.wait_for(
            app({"type": "websocket", "path": STREAM, "headers": []}, client.receive, client.send),
            10,
        )
    )
    code, reason = client.closed() or (None, "")
    assert code == 1003 and "JSON text" in reason


def test_a_cut_reader_is_a_client_that_left_to_the_handler():
    # vLLM-Omni's handler aborts the engine request and logs one line for a disconnect; any
    # other exception it logs with a traceback and leaves the request running.
    starlette = pytest.importorskip("starlette.websockets")
    from omni_cpu.serve.stream_guard import client_gone
    from omni_cpu.serve.supervision import SlowReader

    gone = client_gone()
    assert isinstance(gone, starlette.WebSocketDisconnect) and isinstance(gone, SlowReader)
