"""ASGI middleware vLLM-Omni's API server loads with `--middleware`: one admission, every door.

vLLM-Omni queues every request it is given and mounts more routes than speech, so
this middleware stands in front of all of them (omni_cpu.serve.routes names each
route's door; one it does not name gets 404):

* a route that starts engine work (speech, batch, the WebSocket stream, voice upload)
  is refused while draining (503; a WebSocket is closed 1012) and while a stage is
  down (503 naming it; 1011), and counts toward one in-flight limit (429; 1013), but
  only once its body is in: a body that is not all in within `body_timeout_s` gets
  408 and never held a place, and a connection that sends no request is closed
  (omni_cpu.serve.idle);
* a batch takes one place per item and each item, a WebSocket session's config and
  text, and an uploaded voice pass the same checks as a speech request
  (omni_cpu.serve.checks): `input` longer than `max_input_chars` (400), a `ref_audio`
  http(s) URL unless `--allow-ref-audio-urls` (400; vLLM-Omni would fetch whatever a
  client names), reference audio run would refuse (unreadable, silent, NaN, outside
  1-30 s, a `data:` URL that is not base64, a `file://` path outside
  `--ref-audio-dir`), decoded within bounds;
* a body over `max_body_bytes` (413), or JSON nested deeper than `MAX_JSON_DEPTH`
  (400): before vLLM parses it (its parser would recurse to a 500);
* a prompt that needs more talker positions than its context (max_model_len):
  400 with the limit (vLLM-Omni would answer 500 after the engine refused it);
* `/health` answers 503 while draining or while a stage is down; a 500 vLLM-Omni
  answers in the instant before the supervisor names a dead stage (its "no live
  replica") becomes the same 503; past its deadline a request gets 504.

It keeps `omni_cpu_speech_requests_in_flight` (and how many of those wait on their
client) in vLLM's Prometheus registry, which `/metrics` serves and the supervisor
reads to drain and to tell a stalled stage from a slow client, and times each streamed
reply chunk by chunk (omni_cpu.serve.stream_metrics: first audio, safe start, gaps).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import Any

from prometheus_client import Counter, Gauge

from omni_cpu.serve import idle
from omni_cpu.serve.asgi import (
    ASGIApp,
    BadBody,
    Message,
    Receive,
    Scope,
    Send,
    error_body,
    refuse,
    replay,
    send_json,
)
from omni_cpu.serve.body import parse_fields, read_limited_body, reply_sample_rate
from omni_cpu.serve.checks import (
    audio_bytes_problem,
    batch_items,
    judge_fields,
    judge_ref_audio,
)
from omni_cpu.serve.forms import form_file, is_multipart
from omni_cpu.serve.knobs import (
    IN_FLIGHT_METRIC,
    ON_CLIENT_METRIC,
    REJECTED_METRIC,
    AdmissionLimits,
)
from omni_cpu.serve.long_input import long_parts, speak_in_parts
from omni_cpu.serve.routes import Door, door
from omni_cpu.serve.stream_guard import StreamGuard
from omni_cpu.serve.stream_metrics import StreamRecorder

SPEECH_PATH = "/v1/audio/speech"
HEALTH_PATH = "/health"

IN_FLIGHT = Gauge(IN_FLIGHT_METRIC, "Speech requests admitted and not yet answered in full.")
ON_CLIENT = Gauge(ON_CLIENT_METRIC, "Speech requests in flight waiting on their client.")
REJECTED = Counter(REJECTED_METRIC, "Speech requests turned away.", ["reason"])
# Bodies larger than this are parsed off the event loop, so /health keeps answering.
THREAD_PARSE_BYTES = 1 << 20


class SpeechAdmission:
    """Bounds concurrent speech requests, input length, and refuses work while draining."""

    def __init__(self, app: ASGIApp, limits: AdmissionLimits | None = None) -> None:
        self.app = app
        self.limits = limits if limits is not None else AdmissionLimits.from_env()
        self.in_flight = 0
        if self.limits.accept_frame_limit:
            # Built once in vLLM-Omni's API server process, before it serves a request.
            from omni_cpu.serve.frame_limit import accept_frame_limit

            accept_frame_limit()
        self._builder: Any = None  # omni_cpu.speech.prompts.PromptBuilder, made on first use
        self.on_client = 0
        idle.install(self.limits.body_timeout_s)

    def admit_or_raise(self, places: int) -> None:
        """Take `places` in flight, or raise BadBody(429/503); no await between check and take."""
        limits = self.limits
        if self.draining():
            raise BadBody(
                503, "server is shutting down; retry on another replica", None, "draining"
            )
        if limits.max_in_flight and self.in_flight + places > limits.max_in_flight:
            raise BadBody(
                429,
                f"server is at capacity ({limits.max_in_flight} speech requests in flight); "
                "retry later",
                None,
                "overloaded",
            )
        self.in_flight += places
        IN_FLIGHT.inc(places)

    def release(self, places: int) -> None:
        self.in_flight -= places
        IN_FLIGHT.dec(places)

    def client_waits(self, change: int) -> None:
        """One more (+1) or one fewer (-1) request in flight waiting on its client."""
        self.on_client += change
        ON_CLIENT.inc(change)

    def count_rejected(self, reason: str) -> None:
        REJECTED.labels(reason).inc()

    def draining(self) -> bool:
        return bool(self.limits.drain_file) and os.path.exists(self.limits.drain_file)

    def stage_down(self) -> str | None:
        """What the supervisor wrote when a stage died, or None while all are up."""
        if not self.limits.down_file:
            return None
        try:
            with open(self.limits.down_file) as handle:
                return handle.read().strip() or "a stage is down"
        except OSError:
            return None

    def over_context(self, fields: dict[str, Any]) -> str | None:
        """Why the request's prompt does not fit the talker's context, or None (or unknown)."""
        limits = self.limits
        if not (limits.talker_max_model_len and limits.tokenizer and fields):
            return None
        text = fields.get("input")
        task_type = str(fields.get("task_type") or "CustomVoice")
        # Base prompts also hold the reference's codec frames, known only once the
        # server has decoded its audio: the engine still refuses those.
        if not isinstance(text, str) or task_type not in ("CustomVoice", "VoiceDesign"):
            return None
        from omni_cpu.speech.prompts import PromptBuilder, over_context
        from omni_cpu.speech.request import SpeechRequest

        if self._builder is None:
            self._builder = PromptBuilder(limits.tokenizer)
        request = SpeechRequest(
            text=text,
            speaker=str(fields.get("voice") or ""),
            language=str(fields.get("language") or "Auto"),
            instruct=str(fields.get("instructions") or ""),
            task_type=task_type,
        )
        info = request.additional_information()
        return over_context(self._builder.prompt_length(info), limits.talker_max_model_len)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        method = "WEBSOCKET" if kind == "websocket" else str(scope.get("method", ""))
        found = door(method, path)
        if found is None or found is Door.NOT_SERVED:
            await self._not_served(kind, method, path, send)
            return
        if kind == "websocket":  # the one WebSocket door: Door.STREAM
            await StreamGuard(self, scope, receive, send).run()
            return
        if found is Door.FREE:
            await self._free(scope, receive, send, path)
            return
        down = self.stage_down()
        if down is not None:
            await send_json(
                send,
                503,
                error_body(down, "ServiceUnavailableError", 503),
                [(b"retry-after", b"5")],
            )
            return
        if self.draining():
            self.count_rejected("draining")
            body = error_body(
                "server is shutting down; retry on another replica", "ServiceUnavailableError", 503
            )
            await send_json(send, 503, body, [(b"retry-after", b"1")])
            return
        try:
            body, fields, gone = await self._read(scope, receive)
        except BadBody as bad:
            self.count_rejected(bad.reason)
            await refuse(send, bad)
            return
        if gone:
            return
        handlers = {Door.SPEECH: self._speech, Door.BATCH: self._batch}
        if found is Door.VOICE_UPLOAD:
            await self._voice(scope, replay(body, receive), send, body)
            return
        await handlers[found](scope, replay(body, receive), send, fields)

    async def _not_served(self, kind: str, method: str, path: str, send: Send) -> None:
        self.count_rejected("not_served")
        message = (
            f"{method} {path} is not served by omni-cpu serve (speech only: "
            "POST /v1/audio/speech, /v1/audio/speech/batch, /v1/audio/voices, "
            "WebSocket /v1/audio/speech/stream)"
        )
        if kind == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": ""})
            return
        await send_json(send, 404, error_body(message, "NotFoundError", 404), [])

    async def _free(self, scope: Scope, receive: Receive, send: Send, path: str) -> None:
        """Routes with no engine work: /health reports drain and a down stage."""
        if path == HEALTH_PATH:
            down = self.stage_down()
            if down is not None:
                body = error_body(down, "ServiceUnavailableError", 503)
                await send_json(send, 503, body, [(b"retry-after", b"5")])
                return
            if self.draining():
                body = error_body("server is draining", "ServiceUnavailableError", 503)
                await send_json(send, 503, body, [])
                return
        if scope.get("method") in ("GET", "HEAD"):
            await self.app(scope, receive, send)
            return
        try:  # a body nobody bounds otherwise (POST /ping, DELETE a voice)
            body, _, gone = await self._read(scope, receive)
        except BadBody as bad:
            self.count_rejected(bad.reason)
            await refuse(send, bad)
            return
        if not gone:
            await self.app(scope, replay(body, receive), send)

    async def _read(self, scope: Scope, receive: Receive) -> tuple[bytes, dict[str, Any], bool]:
        """The body, its JSON fields and whether the client left; BadBody when refused."""
        limits = self.limits
        body, gone = await read_limited_body(
            scope, receive, limits.max_body_bytes, limits.body_timeout_s
        )
        if gone:
            return body, {}, True
        if is_multipart(scope):
            return body, {}, False
        if len(body) > THREAD_PARSE_BYTES:
            return body, await asyncio.to_thread(parse_fields, body), False
        return body, parse_fields(body), False

    async def _admitted(
        self,
        send: Send,
        places: int,
        judge: Any,
        answer: Any,
    ) -> None:
        """Take `places`, run `judge` (decoding: off the loop), then `answer`; refusals as JSON."""
        try:
            self.admit_or_raise(places)
        except BadBody as bad:
            self.count_rejected(bad.reason)
            retry = [(b"retry-after", b"1")]
            error_type = "RateLimitError" if bad.status == 429 else "ServiceUnavailableError"
            await send_json(send, bad.status, error_body(str(bad), error_type, bad.status), retry)
            return
        try:
            try:
                await asyncio.to_thread(judge)
            except BadBody as bad:
                self.count_rejected(bad.reason)
                await refuse(send, bad)
                return
            await answer()
        finally:
            self.release(places)

    async def _speech(
        self, scope: Scope, receive: Receive, send: Send, fields: dict[str, Any]
    ) -> None:
        limits = self.limits
        try:
            parts = await long_parts(fields, limits)
            judged = fields if parts is None else {**fields, "input": parts[0]}
            judge_fields(judged, limits)
            for part in parts or [fields.get("input")]:
                self._judge_context({**fields, "input": part})
            timeout_s = self._timeout_s(fields)
        except BadBody as bad:
            self.count_rejected(bad.reason)
            await refuse(send, bad)
            return

        async def answer() -> None:
            if parts is None:
                # A streamed reply is timed as a listener hears it, for /metrics.
                timed = (
                    StreamRecorder(reply_sample_rate(fields)).wrap(send)
                    if fields.get("stream") is True
                    else send
                )
                await self._answer(scope, receive, timed, timeout_s)
            else:
                await speak_in_parts(self._answer, scope, receive, send, fields, parts, timeout_s)

        await self._admitted(send, 1, lambda: judge_ref_audio(fields, limits), answer)

    async def _batch(
        self, scope: Scope, receive: Receive, send: Send, fields: dict[str, Any]
    ) -> None:
        """Each item judged as the speech request it becomes; one place per item."""
        limits = self.limits
        items = batch_items(fields)
        try:
            for index, item in enumerate(items):
                judge_fields(item, limits, f"items[{index}].")
                self._judge_context(item)
            if limits.max_in_flight and len(items) > limits.max_in_flight:
                raise BadBody(
                    400,
                    f"batch of {len(items)} items; this server runs at most "
                    f"{limits.max_in_flight} speech requests at once (send smaller batches)",
                    "items",
                    "batch_too_big",
                )
            timeout_s = self._timeout_s(fields)
        except BadBody as bad:
            self.count_rejected(bad.reason)
            await refuse(send, bad)
            return

        def judge() -> None:
            seen: set[str] = set()
            for index, item in enumerate(items):
                key = str(item.get("ref_audio"))
                if key not in seen:  # a shared reference is decoded once
                    seen.add(key)
                    judge_ref_audio(item, limits, f"items[{index}].")

        await self._admitted(
            send, max(1, len(items)), judge, lambda: self._answer(scope, receive, send, timeout_s)
        )

    async def _voice(self, scope: Scope, receive: Receive, send: Send, body: bytes) -> None:
        """An uploaded voice's audio passes the reference-audio checks before it is stored."""
        try:
            audio = await form_file(scope, body, "audio_sample")
        except BadBody as bad:
            self.count_rejected(bad.reason)
            await refuse(send, bad)
            return

        def judge() -> None:
            if audio is None:
                return  # an embedding, or nothing: vLLM-Omni answers
            problem = audio_bytes_problem("in audio_sample", audio)
            if problem is not None:
                raise BadBody(400, problem, "audio_sample", "ref_audio")

        await self._admitted(send, 1, judge, lambda: self._answer(scope, receive, send, 0.0))

    def _timeout_s(self, fields: dict[str, Any]) -> float:
        """The request's deadline in seconds: the server's, or its own `timeout` if sooner."""
        server = self.limits.request_timeout_s
        asked = fields.get("timeout")
        if asked is None:
            return server
        if isinstance(asked, bool) or not isinstance(asked, (int, float)) or not asked > 0:
            raise BadBody(400, "timeout must be a number of seconds above 0", "timeout", "timeout")
        return min(server, float(asked)) if server else float(asked)

    async def _answer(self, scope: Scope, receive: Receive, send: Send, timeout_s: float) -> None:
        """Let the server answer; end the request if a stage goes down or its deadline passes.

        Not answered yet: 503 (a stage is down) or 504 (the deadline). A stream already
        under way ends: cleanly at its deadline (the audio so far is what was asked
        for), cut when a stage is down (a client must not take it for complete).
        """
        started = False

        async def send_tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            # A client that reads slowly holds its request here, not the engine.
            self.client_waits(+1)
            try:
                await send(message)
            finally:
                self.client_waits(-1)

        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s if timeout_s else None
        task = asyncio.ensure_future(self.app(scope, receive, self._stage_aware(send_tracked)))
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=self.watch_s)
                if done:
                    task.result()
                    return
                down = self.stage_down()
                late = deadline is not None and loop.time() >= deadline
                if down is None and not late:
                    continue
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
                if down is not None:
                    REJECTED.labels("stage_down").inc()
                    if not started:
                        await send_json(
                            send,
                            503,
                            error_body(down, "ServiceUnavailableError", 503),
                            [(b"retry-after", b"5")],
                        )
                    return  # a started stream is left incomplete: the server cuts it
                REJECTED.labels("timeout").inc()
                if started:
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                    return
                message = (
                    f"the request took longer than its {timeout_s:g} s deadline "
                    "(raise the request's timeout, or serve --request-timeout)"
                )
                await send_json(send, 504, error_body(message, "TimeoutError", 504), [])
                return
        finally:
            if not task.done():
                task.cancel()

    watch_s = 0.25  # how often a request in flight looks for a down stage or its deadline

    def _judge_context(self, fields: dict[str, Any]) -> None:
        """Refuse (BadBody) a prompt over the talker's context, when it can be measured."""
        try:
            too_long = self.over_context(fields)
        except Exception:  # no tokenizer here: the engine still refuses it
            too_long = None
        if too_long is not None:
            raise BadBody(
                400,
                f"input is too long: {too_long} (split the text into several requests)",
                "input",
                "over_context",
            )

    def _stage_aware(self, send: Send) -> Send:
        """A `send` that turns the server's 500 into 503 when a stage has just died.

        vLLM-Omni answers 500 ("no live replica") from the moment a stage dies until the
        supervisor has noticed (within a second) and written the down file.
        """
        held: list[Message] = []

        async def send_checked(message: Message) -> None:
            if message["type"] == "http.response.start" and message.get("status") == 500:
                held.append(message)
                return
            if not held:
                await send(message)
                return
            held.append(message)
            if message.get("more_body", False):
                return
            body = b"".join(m.get("body", b"") for m in held[1:])
            down = await self._down_soon(body)
            if down is None:
                for kept in held:
                    await send(kept)
                return
            await send_json(
                send,
                503,
                error_body(down, "ServiceUnavailableError", 503),
                [(b"retry-after", b"5")],
            )

        return send_checked

    async def _down_soon(self, body: bytes) -> str | None:
        """The down stage, waiting briefly for the supervisor to name it; None if none."""
        deadline = asyncio.get_running_loop().time() + self.down_wait_s
        while True:
            down = self.stage_down()
            if down is not None:
                return down
            if asyncio.get_running_loop().time() >= deadline:
                break
            await asyncio.sleep(0.05)
        if b"no live replica" in body:
            return "a stage has no live replica; retry on another replica"
        return None

    down_wait_s = 1.5  # the supervisor looks every 0.25 s
