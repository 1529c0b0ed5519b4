"""Admission for a WebSocket speech session (`/v1/audio/speech/stream`), message by message.

vLLM-Omni's handler takes a `session.config` (voice, reference audio...), then text
(`input.text`) and a flush (`input.done`) per utterance, each answered with audio and a
`session.done`. The guard sits between the client and that handler:

* every message's strings pass the door (omni_cpu.serve.strings) and the config the
  same checks as a speech request's fields (URL policy, reference audio decoded
  within bounds); refused: an `error` event with the message, then close 1008;
* each utterance takes one place in flight from its first text to its `session.done`;
  none free: close 1013 (try again later); its text is bounded like `input` (1009);
* while draining, an utterance under way finishes, then the session is closed 1012
  (service restart: reconnect elsewhere), as is one that has none under way;
* a stage down: close 1011 naming it, at once;
* a client that leaves a message untaken for `send_timeout_s`: its place goes back at
  once and the session ends, whatever the handler still tries to send it;
* a binary frame: close 1003 (the protocol is JSON text).

Close reasons are the first 123 bytes of the one-line message (the protocol's limit).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from typing import Any, Protocol

from omni_cpu.serve.asgi import ASGIApp, BadBody, Message, Receive, Scope, Send
from omni_cpu.serve.checks import fetch_references, judge_fields, judge_ref_audio
from omni_cpu.serve.knobs import AdmissionLimits
from omni_cpu.serve.references import audio_values
from omni_cpu.serve.strings import judge_strings
from omni_cpu.serve.supervision import SlowReader

UNSUPPORTED = 1003  # a binary frame: the protocol is JSON text
POLICY = 1008  # a config or text admission refuses
TOO_BIG = 1009  # an utterance over the input limit
STAGE_DOWN = 1011
DRAINING = 1012
AT_CAPACITY = 1013
MAX_REASON_BYTES = 123


class Gate(Protocol):
    """What the guard asks of admission (omni_cpu.serve.admission.SpeechAdmission)."""

    app: ASGIApp
    limits: AdmissionLimits
    watch_s: float

    def draining(self) -> bool: ...
    def stage_down(self) -> str | None: ...
    def admit_or_raise(self, places: int) -> None: ...
    def release(self, places: int) -> None: ...
    def client_waits(self, change: int) -> None: ...
    def count_rejected(self, reason: str) -> None: ...


@functools.cache
def _gone_type() -> type[Exception]:
    try:
        from starlette.websockets import WebSocketDisconnect
    except ImportError:  # no server runtime here (a unit test's stand-in handler)
        return SlowReader

    class SlowWebSocketReader(WebSocketDisconnect, SlowReader):
        """A client cut for reading too slowly, as the handler sees a client that left."""

        def __init__(self) -> None:
            WebSocketDisconnect.__init__(self, POLICY, "reading too slowly")

    return SlowWebSocketReader


def client_gone() -> Exception:
    """What a send to a client cut for reading too slowly raises: a SlowReader that vLLM-Omni's
    handler takes for a client that left (starlette's WebSocketDisconnect), so it aborts the
    utterance's engine request and logs one line, not a traceback, and its request stops
    holding the stage (written against vllm-omni 0.30.0's serving_speech_stream.py)."""
    return _gone_type()()


def close_reason(message: str) -> str:
    """`message` cut to what a close frame can carry (123 bytes of UTF-8)."""
    data = message.encode()[:MAX_REASON_BYTES]
    return data.decode(errors="ignore")


def _is_session_done(text: str) -> bool:
    """Whether the handler's message ends an utterance (its text may quote the words)."""
    if "session.done" not in text:
        return False
    try:
        return json.loads(text).get("type") == "session.done"
    except (ValueError, AttributeError):
        return False


class StreamGuard:
    """One WebSocket session through admission."""

    def __init__(self, gate: Gate, scope: Scope, receive: Receive, send: Send) -> None:
        self.gate = gate
        self.scope = scope
        self._receive = receive
        self._send = send
        self.accepted = False
        self.closed = False
        self.utterance_open = False
        self.chars = 0
        self.refusal: tuple[int, str] | None = None
        self.cut = False  # cut for reading too slowly: nothing more is sent to it

    async def run(self) -> None:
        gate = self.gate
        down = gate.stage_down()
        if down is not None:
            await self.close(STAGE_DOWN, down)
            return
        if gate.draining():
            await self.close(DRAINING, "server is draining; reconnect to another replica")
            return
        task = asyncio.ensure_future(gate.app(self.scope, self.receive, self.send))
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=gate.watch_s)
                if self.cut and not done:  # whatever the handler still means to send
                    await self._stop(task, POLICY, "")
                    return
                if done:
                    with contextlib.suppress(Exception):
                        task.result()
                    if self.refusal is not None:
                        await self.refuse(*self.refusal)
                    return
                down = gate.stage_down()
                if down is not None:
                    gate.count_rejected("stage_down")
                    await self._stop(task, STAGE_DOWN, down)
                    return
                if gate.draining() and not self.utterance_open:
                    await self._stop(
                        task, DRAINING, "server is draining; reconnect to another replica"
                    )
                    return
        finally:
            if not task.done():
                task.cancel()
            self._end_utterance()

    async def _stop(self, task: asyncio.Future[Any], code: int, reason: str) -> None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        await self.close(code, reason)

    async def refuse(self, code: int, reason: str) -> None:
        """An error event with the whole message (the protocol's), then the close."""
        if not self.closed:
            with contextlib.suppress(Exception):
                if not self.accepted:
                    await self._send({"type": "websocket.accept"})
                    self.accepted = True
                event = json.dumps({"type": "error", "message": reason})
                await self._send({"type": "websocket.send", "text": event})
        await self.close(code, reason)

    async def close(self, code: int, reason: str) -> None:
        """Close the session with `code` and `reason` (accepting it first, so both arrive)."""
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(Exception):
            if not self.accepted:
                await self._send({"type": "websocket.accept"})
            await self._send(
                {"type": "websocket.close", "code": code, "reason": close_reason(reason)}
            )

    def _end_utterance(self) -> None:
        if self.utterance_open:
            self.utterance_open = False
            self.gate.release(1)

    async def send(self, message: Message) -> None:
        if self.cut:
            # vLLM-Omni answers the cut with an error, audio.done, session.done and another
            # error: each would wait the whole send timeout again on the jammed transport.
            raise client_gone()
        kind = message["type"]
        if kind == "websocket.accept":
            self.accepted = True
        elif kind == "websocket.close":
            self.closed = True
        waiting = kind == "websocket.send" and self.utterance_open
        if waiting:
            self.gate.client_waits(+1)
        try:
            # A client that leaves audio untaken past the send timeout loses its session.
            await asyncio.wait_for(self._send(message), self.gate.limits.send_timeout_s or None)
        except TimeoutError:
            self.closed = True  # the transport is jammed: no close frame gets through
            self.cut = True
            self.gate.count_rejected("slow_reader")
            self._end_utterance()  # its place goes back now, not when the handler gives up
            raise client_gone() from None
        finally:
            if waiting:
                self.gate.client_waits(-1)
        text = message.get("text")
        if kind == "websocket.send" and isinstance(text, str) and _is_session_done(text):
            self._end_utterance()

    async def receive(self) -> Message:
        waiting = self.utterance_open
        if waiting:
            self.gate.client_waits(+1)
        try:
            message = await self._receive()
        finally:
            if waiting:
                self.gate.client_waits(-1)
        if message["type"] == "websocket.receive" and not isinstance(message.get("text"), str):
            # The protocol is JSON text; vLLM-Omni's handler reads a binary frame's "text"
            # and fails with a KeyError and no close frame.
            self.refusal = (UNSUPPORTED, "binary frames are not accepted: send JSON text messages")
            self.gate.count_rejected("invalid")
            return {"type": "websocket.disconnect", "code": UNSUPPORTED}
        if message["type"] != "websocket.receive":
            return message
        try:
            rewritten = await self._judge(message["text"])
        except BadBody as bad:
            self.gate.count_rejected(bad.reason)
            code = {429: AT_CAPACITY, 503: DRAINING}.get(bad.status, POLICY)
            if bad.reason == "input_too_long":
                code = TOO_BIG
            self.refusal = (code, str(bad))
            # The handler ends as if the client had left; the guard then closes with why.
            return {"type": "websocket.disconnect", "code": code}
        return message if rewritten is None else {**message, "text": rewritten}

    async def _judge(self, text: str) -> str | None:
        """Refuse (BadBody) what admission refuses; the message rewritten, if it fetched audio."""
        try:
            fields = json.loads(text)
        except (ValueError, RecursionError):
            return None  # the handler answers malformed messages itself
        judge_strings(fields)
        if not isinstance(fields, dict):
            return None
        kind = fields.get("type")
        limits = self.gate.limits
        if kind == "session.config":
            judge_fields(fields, limits)
            if audio_values(fields):
                # Decoding holds a place, so at most the limit's worth of memory decodes at once.
                self.gate.admit_or_raise(1)
                self.gate.client_waits(+1)  # fetching and decoding hold no stage
                try:
                    fetched = await asyncio.to_thread(fetch_references, fields, limits)
                    await asyncio.to_thread(judge_ref_audio, fields, limits)
                finally:
                    self.gate.client_waits(-1)
                    self.gate.release(1)
                return json.dumps(fields) if fetched else None
        elif kind == "input.text" and isinstance(fields.get("text"), str):
            if not self.utterance_open:
                self.gate.admit_or_raise(1)
                self.utterance_open = True
                self.chars = 0
            self.chars += len(fields["text"])
            if limits.max_input_chars and self.chars > limits.max_input_chars:
                raise BadBody(
                    400,
                    f"utterance is over {limits.max_input_chars} characters; send input.done "
                    "sooner (split the text into several utterances)",
                    "text",
                    "input_too_long",
                )
        return None
