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
* a body over `max_body_bytes` (413), or JSON nested deeper than `MAX_JSON_DEPTH`
  (400): any POST, before vLLM parses it (its parser would recurse to a 500);
* a `data:` or `file://` `ref_audio` that is unreadable, missing, silent, NaN or
  outside 1-30 s: 400, by the same rules as `run --ref-audio` (vLLM-Omni checks
  only the duration: it would clone from silence); a `data:` URL that is not
  base64, or a `file://` path outside `--ref-audio-dir`: 400;
* a prompt that needs more talker positions than its context (max_model_len):
  400 with the limit (vLLM-Omni would answer 500 after the engine refused it);
* while the supervisor drains (its drain file exists): 503 for new speech requests
  and for `/health`, so load balancers stop sending traffic;
* while a stage is down (the supervisor's down file exists, naming it): 503 for
  `/health` and speech requests with that name, until the supervisor exits; a 500
  vLLM-Omni answers in the instant before the supervisor writes that file (its
  "no live replica") becomes the same 503.

It keeps `omni_cpu_speech_requests_in_flight` in vLLM's Prometheus registry, which
`/metrics` serves and the supervisor reads while draining, and times each streamed
reply chunk by chunk (omni_cpu.serve.listening: first audio, safe start, gaps).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from prometheus_client import Counter, Gauge

from omni_cpu.serve.knobs import IN_FLIGHT_METRIC, REJECTED_METRIC, AdmissionLimits
from omni_cpu.serve.listening import StreamRecorder, stream_sample_rate

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


# Deeper than any speech request needs; vLLM's parser would recurse past Python's limit.
MAX_JSON_DEPTH = 32
# Bodies larger than this are parsed off the event loop, so /health keeps answering.
THREAD_PARSE_BYTES = 1 << 20


class BadBody(Exception):
    """A request body refused before the server sees it: its status and one-line message."""

    def __init__(self, status: int, message: str, param: str | None, reason: str) -> None:
        super().__init__(message)
        self.status = status
        self.param = param
        self.reason = reason  # the rejected counter's label


def json_depth(data: Any) -> int:
    """How deeply lists and objects nest in `data` (0 for a scalar), without recursion."""
    deepest = 0
    stack = [(data, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > MAX_JSON_DEPTH:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def parse_fields(body: bytes) -> dict[str, Any]:
    """The request's JSON object, {} when it is not one (vLLM answers malformed JSON itself).

    Raises BadBody for JSON nested too deeply to parse safely.
    """
    too_deep = BadBody(
        400,
        f"request body nests deeper than {MAX_JSON_DEPTH} levels; send a flat JSON object",
        None,
        "too_deep",
    )
    try:
        data = json.loads(body)
    except RecursionError:
        raise too_deep from None
    except (ValueError, UnicodeDecodeError):
        return {}
    if json_depth(data) > MAX_JSON_DEPTH:
        raise too_deep
    return data if isinstance(data, dict) else {}


def input_length(fields: dict[str, Any]) -> int | None:
    """Characters in the request's `input`, or None when the body is not what we can judge."""
    text = fields.get("input")
    return len(text) if isinstance(text, str) else None


def _ref_items(fields: dict[str, Any]) -> list[Any]:
    ref = fields.get("ref_audio")
    return ref if isinstance(ref, list) else [ref]


def ref_audio_is_url(fields: dict[str, Any]) -> bool:
    """True when the request asks the server to fetch its reference audio over http(s)."""
    return any(
        isinstance(item, str) and item.strip().lower().startswith(("http://", "https://"))
        for item in _ref_items(fields)
    )


def _data_url_problem(item: str) -> str | None:
    import base64
    import binascii

    from omni_cpu.errors import InputError
    from omni_cpu.speech.ref_audio import decode_reference_audio

    header, comma, payload = item.partition(",")
    if not comma or not header.lower().endswith(";base64"):
        return "ref_audio data: URLs must be base64 (send data:audio/wav;base64,<the file's bytes>)"
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        return "ref_audio is not valid base64 (send data:audio/wav;base64,<the file's bytes>)"
    try:
        decode_reference_audio("in ref_audio", data)
    except InputError as error:
        return error.one_line()
    return None


def _file_url_problem(item: str, ref_audio_dir: str) -> str | None:
    from urllib.parse import unquote, urlsplit

    from omni_cpu.errors import InputError
    from omni_cpu.speech.ref_audio import read_reference_audio

    if not ref_audio_dir:
        return (
            "this server reads no file:// ref_audio; send the audio as base64 "
            "(data:audio/wav;base64,...), or start omni-cpu serve with --ref-audio-dir"
        )
    parts = urlsplit(item.strip())
    if parts.netloc not in ("", "localhost"):
        return f"ref_audio {item!r} names another host; file:// paths are read on this server"
    base = os.path.realpath(ref_audio_dir)
    path = os.path.realpath(unquote(parts.path))
    if os.path.commonpath([base, path]) != base:
        return f"ref_audio {item!r} is outside this server's --ref-audio-dir"
    if not os.path.isfile(path):
        return f"ref_audio {item!r} does not exist under this server's --ref-audio-dir"
    try:
        read_reference_audio(Path(path), source=item)
    except InputError as error:
        return error.one_line()
    return None


def ref_audio_problem(fields: dict[str, Any], ref_audio_dir: str = "") -> str | None:
    """Why a request's `data:` or `file://` reference audio cannot be cloned from, or None.

    URLs (http/https) are judged elsewhere; anything else is vLLM-Omni's to refuse.
    """
    for item in _ref_items(fields):
        if not isinstance(item, str):
            continue
        scheme = item.strip()[:7].lower()
        if scheme.startswith("data:"):
            problem = _data_url_problem(item)
        elif scheme == "file://":
            problem = _file_url_problem(item, ref_audio_dir)
        else:
            continue
        if problem is not None:
            return problem
    return None


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def read_limited_body(scope: Scope, receive: Receive, limit: int) -> tuple[bytes, bool]:
    """Like read_body, but raises BadBody(413) past `limit` bytes (0 = no limit)."""
    too_big = BadBody(
        413,
        f"request body is over this server's {limit} byte limit (send a shorter clip)",
        None,
        "too_large",
    )
    declared = _content_length(scope)
    if limit and declared is not None and declared > limit:
        raise too_big
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b"".join(chunks), True
        chunk = message.get("body", b"")
        size += len(chunk)
        if limit and size > limit:
            raise too_big
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), False


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
        if scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        if path != SPEECH_PATH:
            await self._other_post(scope, receive, send)
            return
        await self._speech(scope, receive, send)

    async def _read(self, scope: Scope, receive: Receive) -> tuple[bytes, dict[str, Any], bool]:
        """The body, its JSON fields and whether the client left; BadBody when refused."""
        body, gone = await read_limited_body(scope, receive, self.limits.max_body_bytes)
        if gone:
            return body, {}, True
        if len(body) > THREAD_PARSE_BYTES:
            return body, await asyncio.to_thread(parse_fields, body), False
        return body, parse_fields(body), False

    async def _other_post(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Other endpoints: only the body's size and depth are judged here."""
        try:
            body, _, gone = await self._read(scope, receive)
        except BadBody as bad:
            REJECTED.labels(bad.reason).inc()
            await _refuse(send, bad)
            return
        if not gone:
            await self.app(scope, replay(body, receive), send)

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
            try:
                body, fields, gone = await self._read(scope, receive)
                if gone:
                    return
                self._judge(fields)
                # Decoding up to 30 s of audio stays off the event loop.
                bad_ref = None
                if "ref_audio" in fields:
                    bad_ref = await asyncio.to_thread(
                        ref_audio_problem, fields, limits.ref_audio_dir
                    )
                if bad_ref is not None:
                    raise BadBody(400, bad_ref, "ref_audio", "ref_audio")
                self._judge_length(fields)
                timeout_s = self._timeout_s(fields)
            except BadBody as bad:
                REJECTED.labels(bad.reason).inc()
                await _refuse(send, bad)
                return
            if fields.get("stream") is True:  # what a listener hears, on /metrics
                send = StreamRecorder(stream_sample_rate(fields)).wrap(send)
            await self._answer(scope, replay(body, receive), send, timeout_s)
        finally:
            self.in_flight -= 1
            IN_FLIGHT.dec()

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
            await send(message)

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

    def _judge(self, fields: dict[str, Any]) -> None:
        """Refuse, by raising BadBody, what needs no audio decoding to judge."""
        if not self.limits.allow_ref_audio_urls and ref_audio_is_url(fields):
            raise BadBody(
                400,
                "this server does not fetch ref_audio URLs; send the audio as base64 "
                "(data:audio/wav;base64,...) or a file:// path under its --ref-audio-dir, "
                "or start omni-cpu serve with --allow-ref-audio-urls",
                "ref_audio",
                "ref_audio_url",
            )

    def _judge_length(self, fields: dict[str, Any]) -> None:
        limits = self.limits
        length = input_length(fields) if limits.max_input_chars else None
        if length is not None and length > limits.max_input_chars:
            raise BadBody(
                400,
                f"input is {length} characters; this server accepts at most "
                f"{limits.max_input_chars} (split the text into several requests)",
                "input",
                "input_too_long",
            )
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


async def _refuse(send: Send, bad: BadBody) -> None:
    error_type = "BadRequestError" if bad.status == 400 else "RequestEntityTooLargeError"
    await send_json(send, bad.status, error_body(str(bad), error_type, bad.status, bad.param), [])
