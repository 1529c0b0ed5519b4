"""ASGI middleware vLLM-Omni's API server loads with `--middleware`: bounded speech admission.

vLLM-Omni queues every request it is given, so under overload memory grows without
end and latency with it. This middleware sits in front of `POST /v1/audio/speech`:

* more than `max_in_flight` speech requests at once (the talker's `max_num_seqs`
  plus a waiting cap): answer 429 with a JSON error and `Retry-After`;
* `input` longer than `max_input_chars`: 400 (vLLM-Omni itself checks empty input,
  unknown voices and formats, but not length);
* a `ref_audio` that is an http(s) URL, unless the server was started with
  `--allow-ref-audio-urls`: 400 (vLLM-Omni would fetch whatever URL a client names);
  base64 `data:` audio and `file://` paths under `--ref-audio-dir` go through;
* a base64 `data:` `ref_audio` that is unreadable, silent or outside 1-30 s: 400,
  by the same rules as `run --ref-audio` (vLLM-Omni checks only the duration: it
  would clone from silence);
* a prompt that needs more talker positions than its context (max_model_len):
  400 with the limit (vLLM-Omni would answer 500 after the engine refused it);
* while the supervisor drains (its drain file exists): 503 for new speech requests
  and for `/health`, so load balancers stop sending traffic;
* while a stage is down (the supervisor's down file exists, naming it): 503 for
  `/health` and speech requests with that name, until the supervisor exits.

It keeps `omni_cpu_speech_requests_in_flight` in vLLM's Prometheus registry, which
`/metrics` serves and the supervisor reads while draining.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from prometheus_client import Counter, Gauge

from omni_cpu.serve.knobs import IN_FLIGHT_METRIC, REJECTED_METRIC, AdmissionLimits

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

SPEECH_PATH = "/v1/audio/speech"
HEALTH_PATH = "/health"

IN_FLIGHT = Gauge(IN_FLIGHT_METRIC, "Speech requests admitted and not yet answered in full.")
REJECTED = Counter(REJECTED_METRIC, "Speech requests turned away.", ["reason"])


def error_body(message: str, error_type: str, code: int, param: str | None = None) -> bytes:
    """vLLM's JSON error shape, so OpenAI clients raise the matching exception."""
    error = {"message": message, "type": error_type, "param": param, "code": code}
    return json.dumps({"error": error}).encode()


async def send_json(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    """Answer a request with a complete JSON response."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def read_body(receive: Receive) -> tuple[bytes, bool]:
    """The whole request body, and whether the client went away while sending it."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b"".join(chunks), True
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks), False


def replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands the already-read body to the app, then defers to the client."""
    sent = False

    async def receive_again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return receive_again


def _fields(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return {}  # vLLM answers malformed JSON itself
    return data if isinstance(data, dict) else {}


def input_length(body: bytes) -> int | None:
    """Characters in the request's `input`, or None when the body is not what we can judge."""
    text = _fields(body).get("input")
    return len(text) if isinstance(text, str) else None


def ref_audio_is_url(body: bytes) -> bool:
    """True when the request asks the server to fetch its reference audio over http(s)."""
    ref = _fields(body).get("ref_audio")
    refs = ref if isinstance(ref, list) else [ref]
    return any(
        isinstance(item, str) and item.strip().lower().startswith(("http://", "https://"))
        for item in refs
    )


def ref_audio_problem(body: bytes) -> str | None:
    """Why a request's base64 reference audio cannot be cloned from, in one line, or None.

    Only `data:...;base64,` references are judged here (URLs and file:// paths are
    read by vLLM-Omni, after this middleware).
    """
    import base64
    import binascii

    from omni_cpu.errors import InputError
    from omni_cpu.launch.ref_audio import decode_reference_audio

    ref = _fields(body).get("ref_audio")
    for item in ref if isinstance(ref, list) else [ref]:
        if not (isinstance(item, str) and item[:5].lower() == "data:"):
            continue
        header, comma, payload = item.partition(",")
        if not comma or not header.lower().endswith(";base64"):
            continue
        try:
            data = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            return "ref_audio is not valid base64 (send data:audio/wav;base64,<the file's bytes>)"
        try:
            decode_reference_audio("in ref_audio", data)
        except InputError as error:
            return error.one_line()
    return None


class SpeechAdmission:
    """Bounds concurrent speech requests, input length, and refuses work while draining."""

    def __init__(self, app: ASGIApp, limits: AdmissionLimits | None = None) -> None:
        self.app = app
        self.limits = limits if limits is not None else AdmissionLimits.from_env()
        self.in_flight = 0
        if self.limits.accept_frame_limit:
            # Built once in vLLM-Omni's API server process, before it serves a request.
            from omni_cpu.platform.serving import accept_frame_limit

            accept_frame_limit()
        self._builder: Any = None  # omni_cpu.platform.prompts.PromptBuilder, made on first use

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

    def over_context(self, body: bytes) -> str | None:
        """Why the request's prompt does not fit the talker's context, or None (or unknown)."""
        limits = self.limits
        fields = _fields(body)
        if not (limits.talker_max_model_len and limits.tokenizer and fields):
            return None
        text = fields.get("input")
        task_type = str(fields.get("task_type") or "CustomVoice")
        # Base prompts also hold the reference's codec frames, known only once the
        # server has decoded its audio: the engine still refuses those.
        if not isinstance(text, str) or task_type not in ("CustomVoice", "VoiceDesign"):
            return None
        from omni_cpu.launch.prompt import over_context
        from omni_cpu.launch.request import SpeechRequest
        from omni_cpu.platform.prompts import PromptBuilder

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
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        down = self.stage_down() if path in (HEALTH_PATH, SPEECH_PATH) else None
        if down is not None:
            body = error_body(down, "ServiceUnavailableError", 503)
            await send_json(send, 503, body, [(b"retry-after", b"5")])
            return
        if path == HEALTH_PATH and self.draining():
            body = error_body("server is draining", "ServiceUnavailableError", 503)
            await send_json(send, 503, body, [])
            return
        if path != SPEECH_PATH or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        await self._speech(scope, receive, send)

    async def _speech(self, scope: Scope, receive: Receive, send: Send) -> None:
        limits = self.limits
        if self.draining():
            REJECTED.labels("draining").inc()
            body = error_body(
                "server is shutting down; retry on another replica", "ServiceUnavailableError", 503
            )
            await send_json(send, 503, body, [(b"retry-after", b"1")])
            return
        if limits.max_in_flight and self.in_flight >= limits.max_in_flight:
            REJECTED.labels("overloaded").inc()
            body = error_body(
                f"server is at capacity ({limits.max_in_flight} speech requests in flight); "
                "retry later",
                "RateLimitError",
                429,
            )
            await send_json(send, 429, body, [(b"retry-after", b"1")])
            return
        # Count before reading the body: a request is admitted from the moment it is let in,
        # and no await separates the check from the increment.
        self.in_flight += 1
        IN_FLIGHT.inc()
        try:
            body, gone = await read_body(receive)
            if gone:
                return
            if not limits.allow_ref_audio_urls and ref_audio_is_url(body):
                REJECTED.labels("ref_audio_url").inc()
                message = (
                    "this server does not fetch ref_audio URLs; send the audio as base64 "
                    "(data:audio/wav;base64,...) or a file:// path under its --ref-audio-dir, "
                    "or start omni-cpu serve with --allow-ref-audio-urls"
                )
                await send_json(
                    send, 400, error_body(message, "BadRequestError", 400, "ref_audio"), []
                )
                return
            # Decoding up to 30 s of audio stays off the event loop.
            bad_ref = None
            if b"ref_audio" in body:
                bad_ref = await asyncio.to_thread(ref_audio_problem, body)
            if bad_ref is not None:
                REJECTED.labels("ref_audio").inc()
                await send_json(
                    send, 400, error_body(bad_ref, "BadRequestError", 400, "ref_audio"), []
                )
                return
            length = input_length(body) if limits.max_input_chars else None
            if length is not None and length > limits.max_input_chars:
                REJECTED.labels("input_too_long").inc()
                message = (
                    f"input is {length} characters; this server accepts at most "
                    f"{limits.max_input_chars} (split the text into several requests)"
                )
                await send_json(send, 400, error_body(message, "BadRequestError", 400, "input"), [])
                return
            try:
                too_long = self.over_context(body)
            except Exception:  # no tokenizer here: the engine still refuses it
                too_long = None
            if too_long is not None:
                REJECTED.labels("over_context").inc()
                message = f"input is too long: {too_long} (split the text into several requests)"
                await send_json(send, 400, error_body(message, "BadRequestError", 400, "input"), [])
                return
            receive = replay(body, receive)
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
            IN_FLIGHT.dec()
