"""Each door's handler (omni_cpu.serve.routes names a route's door): the route→handler table.

A handler takes admission (its limits, its places, the supervision of what it lets
through) and one request. The engine doors over HTTP read their body first, once
no stage is down and the server is not draining; each then judges what it is given
(omni_cpu.serve.checks) and lets the server answer under supervision.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from omni_cpu.serve.asgi import (
    BadBody,
    Receive,
    Scope,
    Send,
    error_body,
    refuse,
    replay,
    send_json,
)
from omni_cpu.serve.body import reply_sample_rate
from omni_cpu.serve.checks import (
    audio_bytes_problem,
    batch_items,
    fetch_references,
    judge_fields,
    judge_ref_audio,
)
from omni_cpu.serve.forms import form_file
from omni_cpu.serve.knobs import AdmissionLimits
from omni_cpu.serve.long_input import long_parts, speak_in_parts
from omni_cpu.serve.messages import rewording
from omni_cpu.serve.references import audio_values
from omni_cpu.serve.routes import WEBSOCKET, Door, served_routes
from omni_cpu.serve.stream_guard import Gate, StreamGuard
from omni_cpu.serve.stream_metrics import StreamRecorder
from omni_cpu.serve.strings import judge_strings
from omni_cpu.serve.supervision import reply_stage_down


class Admission(Gate, Protocol):
    """What a handler asks of admission (omni_cpu.serve.admission.SpeechAdmission)."""

    async def read(self, scope: Scope, receive: Receive) -> tuple[bytes, dict[str, Any], bool]: ...
    async def answer(
        self, scope: Scope, receive: Receive, send: Send, timeout_s: float
    ) -> None: ...
    def judge_context(self, fields: dict[str, Any]) -> None: ...


async def turned_away(gate: Admission, send: Send, bad: BadBody) -> None:
    """A request refused at the door: counted by its reason, answered with its error."""
    gate.count_rejected(bad.reason)
    await refuse(send, bad)


class Outgoing:
    """The body the server is sent: the request's own, or its fields rewritten once the
    reference audio URLs in them are fetched into data: URLs (omni_cpu.serve.fetch)."""

    def __init__(self, body: bytes, fields: dict[str, Any], limits: AdmissionLimits) -> None:
        self.body = body
        self.fields = fields
        self.limits = limits

    @property
    def fetches(self) -> bool:
        """Whether judging it fetches a reference over the network (which can take a while)."""
        items = self.fields.get("items")
        parts = [self.fields, *(items if isinstance(items, list) else [])]
        return any(
            isinstance(value, str) and value.lstrip().lower().startswith(("http://", "https://"))
            for part in parts
            if isinstance(part, dict)
            for _, value in audio_values(part)
        )

    def fetch_references(self) -> None:
        if fetch_references(self.fields, self.limits):
            self.body = json.dumps(self.fields).encode()


HEALTH_PATH = "/health"

Handler = Callable[[Admission, Scope, Receive, Send], Awaitable[None]]
BodyHandler = Callable[[Admission, Scope, Receive, Send, bytes, dict[str, Any]], Awaitable[None]]


async def not_served(gate: Admission, scope: Scope, receive: Receive, send: Send) -> None:
    """404 (a WebSocket: close 1008) for a route that is not speech, or no route at all."""
    gate.count_rejected("not_served")
    kind = scope["type"]
    method = WEBSOCKET if kind == "websocket" else str(scope.get("method", ""))
    path = scope.get("path", "")
    message = f"{method} {path} is not served by omni-cpu serve (speech only: {served_routes()})"
    if kind == "websocket":
        await send({"type": "websocket.close", "code": 1008, "reason": ""})
        return
    await send_json(send, 404, error_body(message, "NotFoundError", 404), [])


async def free(gate: Admission, scope: Scope, receive: Receive, send: Send) -> None:
    """Routes with no engine work: /health reports drain and a down stage."""
    if scope.get("path", "") == HEALTH_PATH:
        down = gate.stage_down()
        if down is not None:
            await reply_stage_down(send, down)
            return
        if gate.draining():
            body = error_body("server is draining", "ServiceUnavailableError", 503)
            await send_json(send, 503, body, [])
            return
    if scope.get("method") in ("GET", "HEAD"):
        await gate.app(scope, receive, send)
        return
    try:  # a body nobody bounds otherwise (POST /ping, DELETE a voice)
        body, _, gone = await gate.read(scope, receive)
    except BadBody as bad:
        await turned_away(gate, send, bad)
        return
    if not gone:
        await gate.app(scope, replay(body, receive), send)


async def stream(gate: Admission, scope: Scope, receive: Receive, send: Send) -> None:
    """The WebSocket session, message by message (omni_cpu.serve.stream_guard)."""
    await StreamGuard(gate, scope, receive, send).run()


def with_body(handle: BodyHandler) -> Handler:
    """`handle`, given the body once no stage is down, the server is not draining, and the
    body is all in within bounds (and its strings pass the door); `handle` replays the body
    (or the one it rewrote) to the server."""

    async def handled(gate: Admission, scope: Scope, receive: Receive, send: Send) -> None:
        down = gate.stage_down()
        if down is not None:
            await reply_stage_down(send, down)
            return
        if gate.draining():
            gate.count_rejected("draining")
            body = error_body(
                "server is shutting down; retry on another replica", "ServiceUnavailableError", 503
            )
            await send_json(send, 503, body, [(b"retry-after", b"1")])
            return
        try:
            body, fields, gone = await gate.read(scope, receive)
            judge_strings(fields)
        except BadBody as bad:
            await turned_away(gate, send, bad)
            return
        if not gone:
            await handle(gate, scope, receive, send, body, fields)

    return handled


async def client_left(receive: Receive) -> None:
    """Return once the client has gone (its connection closed while the body is judged)."""
    while (await receive())["type"] != "http.disconnect":
        await asyncio.sleep(0.05)  # a server that has nothing more to say answers at once


async def judged(judge: Any, receive: Receive | None) -> bool:
    """Run `judge` off the loop (BadBody propagates); False when the client left first.

    A reference fetch can take its whole deadline: a client that goes away meanwhile gets its
    place back at once, and the fetch runs out its deadline holding none.
    """
    judging = asyncio.ensure_future(asyncio.to_thread(judge))
    if receive is None:
        await judging
        return True
    leaving = asyncio.ensure_future(client_left(receive))
    await asyncio.wait({judging, leaving}, return_when=asyncio.FIRST_COMPLETED)
    if not judging.done():
        judging.add_done_callback(lambda done: done.exception())  # nobody waits for it now
        return False
    leaving.cancel()
    judging.result()
    return True


async def admitted(
    gate: Admission,
    send: Send,
    places: int,
    judge: Any,
    answer: Any,
    receive: Receive | None = None,
) -> None:
    """Take `places`, run `judge` (decoding: off the loop), then `answer`; refusals as JSON.

    With `receive`, a client that leaves while it is judged frees its places then."""
    try:
        gate.admit_or_raise(places)
    except BadBody as bad:
        gate.count_rejected(bad.reason)
        retry = [(b"retry-after", b"1")]
        error_type = "RateLimitError" if bad.status == 429 else "ServiceUnavailableError"
        await send_json(send, bad.status, error_body(str(bad), error_type, bad.status), retry)
        return
    try:
        # Fetching and decoding a reference holds no stage: the stall watch must not count it.
        gate.client_waits(+1)
        try:
            if not await judged(judge, receive):
                gate.count_rejected("client_left")
                return
        except BadBody as bad:
            await turned_away(gate, send, bad)
            return
        finally:
            gate.client_waits(-1)
        await answer()
    finally:
        gate.release(places)


async def speech(
    gate: Admission,
    scope: Scope,
    receive: Receive,
    send: Send,
    body: bytes,
    fields: dict[str, Any],
) -> None:
    """One speech request (long input spoken in parts); one place."""
    limits = gate.limits
    try:
        parts = await long_parts(fields, limits)
        judged = fields if parts is None else {**fields, "input": parts[0]}
        judge_fields(judged, limits)
        for part in parts or [fields.get("input")]:
            gate.judge_context({**fields, "input": part})
        timeout_s = timeout_of(gate, fields)
    except BadBody as bad:
        await turned_away(gate, send, bad)
        return
    outgoing = Outgoing(body, fields, limits)

    def judge() -> None:
        outgoing.fetch_references()
        judge_ref_audio(fields, limits)

    async def answer() -> None:
        replayed = replay(outgoing.body, receive)
        if parts is None:
            # A streamed reply is timed as a listener hears it, for /metrics.
            timed = (
                StreamRecorder(reply_sample_rate(fields)).wrap(send)
                if fields.get("stream") is True
                else send
            )
            await gate.answer(scope, replayed, rewording(timed), timeout_s)
        else:
            await speak_in_parts(gate.answer, scope, replayed, send, fields, parts, timeout_s)

    await admitted(gate, send, 1, judge, answer, receive if outgoing.fetches else None)


async def batch(
    gate: Admission,
    scope: Scope,
    receive: Receive,
    send: Send,
    body: bytes,
    fields: dict[str, Any],
) -> None:
    """Each item judged as the speech request it becomes; one place per item."""
    limits = gate.limits
    items = batch_items(fields)
    try:
        for index, item in enumerate(items):
            judge_fields(item, limits, f"items[{index}].")
            gate.judge_context(item)
        if limits.max_in_flight and len(items) > limits.max_in_flight:
            raise BadBody(
                400,
                f"batch of {len(items)} items; this server runs at most "
                f"{limits.max_in_flight} speech requests at once (send smaller batches)",
                "items",
                "batch_too_big",
            )
        timeout_s = timeout_of(gate, fields)
    except BadBody as bad:
        await turned_away(gate, send, bad)
        return
    outgoing = Outgoing(body, fields, limits)

    def judge() -> None:
        outgoing.fetch_references()
        seen: set[str] = set()
        for index, item in enumerate(batch_items(fields)):
            key = str(audio_values(item))
            if key not in seen:  # a shared reference is decoded once
                seen.add(key)
                judge_ref_audio(item, limits, f"items[{index}].")

    await admitted(
        gate,
        send,
        max(1, len(items)),
        judge,
        lambda: gate.answer(scope, replay(outgoing.body, receive), send, timeout_s),
        receive if outgoing.fetches else None,
    )


async def voice_upload(
    gate: Admission,
    scope: Scope,
    receive: Receive,
    send: Send,
    body: bytes,
    fields: dict[str, Any],
) -> None:
    """An uploaded voice's audio passes the reference-audio checks before it is stored."""
    try:
        audio = await form_file(scope, body, "audio_sample")
    except BadBody as bad:
        await turned_away(gate, send, bad)
        return

    def judge() -> None:
        if audio is None:
            return  # an embedding, or nothing: vLLM-Omni answers
        problem = audio_bytes_problem("in audio_sample", audio)
        if problem is not None:
            raise BadBody(400, problem, "audio_sample", "ref_audio")

    replayed = replay(body, receive)
    await admitted(gate, send, 1, judge, lambda: gate.answer(scope, replayed, rewording(send), 0.0))


def timeout_of(gate: Admission, fields: dict[str, Any]) -> float:
    """The request's deadline in seconds: the server's, or its own `timeout` if sooner."""
    server = gate.limits.request_timeout_s
    asked = fields.get("timeout")
    if asked is None:
        return server
    if isinstance(asked, bool) or not isinstance(asked, (int, float)) or not asked > 0:
        raise BadBody(400, "timeout must be a number of seconds above 0", "timeout", "timeout")
    return min(server, float(asked)) if server else float(asked)


# The route→handler table: each door of omni_cpu.serve.routes, and what takes it.
HANDLERS: dict[Door, Handler] = {
    Door.FREE: free,
    Door.SPEECH: with_body(speech),
    Door.BATCH: with_body(batch),
    Door.STREAM: stream,
    Door.VOICE_UPLOAD: with_body(voice_upload),
    Door.NOT_SERVED: not_served,
}
