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

The rooms: omni_cpu.serve.handlers (the route→handler table), omni_cpu.serve.counting
(places in flight), omni_cpu.serve.supervision (a request watched for a down stage
and its deadline); this module is the middleware that joins them.
"""

from __future__ import annotations

import asyncio
from typing import Any

from omni_cpu.serve import idle, supervision
from omni_cpu.serve.asgi import ASGIApp, BadBody, Receive, Scope, Send
from omni_cpu.serve.body import parse_fields, read_limited_body
from omni_cpu.serve.counting import Places, count_rejected
from omni_cpu.serve.forms import is_multipart
from omni_cpu.serve.handlers import HANDLERS, not_served
from omni_cpu.serve.knobs import AdmissionLimits
from omni_cpu.serve.routes import WEBSOCKET, door

# Bodies larger than this are parsed off the event loop, so /health keeps answering.
THREAD_PARSE_BYTES = 1 << 20


class SpeechAdmission:
    """Bounds concurrent speech requests, input length, and refuses work while draining."""

    watch_s = 0.25  # how often a request in flight looks for a down stage or its deadline
    down_wait_s = 1.5  # the supervisor looks every 0.25 s

    def __init__(self, app: ASGIApp, limits: AdmissionLimits | None = None) -> None:
        self.app = app
        self.limits = limits if limits is not None else AdmissionLimits.from_env()
        self.places = Places(self.limits.max_in_flight)
        if self.limits.accept_frame_limit:
            # Built once in vLLM-Omni's API server process, before it serves a request.
            from omni_cpu.serve.frame_limit import accept_frame_limit

            accept_frame_limit()
        self._builder: Any = None  # omni_cpu.speech.prompts.PromptBuilder, made on first use
        idle.install(self.limits.body_timeout_s)

    @property
    def in_flight(self) -> int:
        return self.places.in_flight

    @in_flight.setter
    def in_flight(self, count: int) -> None:
        self.places.in_flight = count

    @property
    def on_client(self) -> int:
        return self.places.on_client

    def admit_or_raise(self, places: int) -> None:
        """Take `places` in flight, or raise BadBody(429/503); no await between check and take."""
        self.places.take(places, self.draining())

    def release(self, places: int) -> None:
        self.places.release(places)

    def client_waits(self, change: int) -> None:
        """One more (+1) or one fewer (-1) request in flight waiting on its client."""
        self.places.client_waits(change)

    def count_rejected(self, reason: str) -> None:
        count_rejected(reason)

    def draining(self) -> bool:
        return supervision.draining(self.limits.drain_file)

    def stage_down(self) -> str | None:
        """What the supervisor wrote when a stage died, or None while all are up."""
        return supervision.stage_down(self.limits.down_file)

    async def answer(self, scope: Scope, receive: Receive, send: Send, timeout_s: float) -> None:
        """Let the server answer under supervision (omni_cpu.serve.supervision.answer)."""
        await supervision.answer(self, scope, receive, send, timeout_s)

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
        method = WEBSOCKET if kind == "websocket" else str(scope.get("method", ""))
        found = door(method, scope.get("path", ""))
        handle = not_served if found is None else HANDLERS[found]
        await handle(self, scope, receive, send)

    async def read(self, scope: Scope, receive: Receive) -> tuple[bytes, dict[str, Any], bool]:
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

    def judge_context(self, fields: dict[str, Any]) -> None:
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
