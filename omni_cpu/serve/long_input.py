"""Long HTTP input spoken as one answer: split into sentences, each part its own request.

The talker's context bounds one request's text (`max_input_chars`), while the
WebSocket path speaks any length by splitting it into sentences. A plain speech
request whose `input` is longer, up to `max_long_input_chars`, is split the same
way (vLLM-Omni's own SpeechTextSplitter, sentence granularity), sentences packed
into parts of at most `max_input_chars`, each part asked of the server in turn as
PCM, and the audio joined, whole frames after whole frames, into one answer in the
requested format: no gap and no second header at the seams. Non-streamed only: a
stream of long text is the WebSocket's.
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Awaitable, Callable
from typing import Any

from omni_cpu.serve.asgi import BadBody, Message, Receive, Scope, Send, replay
from omni_cpu.serve.body import reply_sample_rate
from omni_cpu.serve.checks import input_length
from omni_cpu.serve.knobs import AdmissionLimits

# How admission answers one request: (scope, receive, send, timeout_s).
Answer = Callable[[Scope, Receive, Send, float], Awaitable[None]]

# The formats vLLM-Omni 0.30.0 answers, as soundfile writes them (audio_utils_mixin).
FORMATS: dict[str, tuple[str, str, str | None]] = {
    "wav": ("WAV", "audio/wav", "PCM_16"),
    "pcm": ("RAW", "audio/pcm", "PCM_16"),
    "flac": ("FLAC", "audio/flac", None),
    "mp3": ("MP3", "audio/mpeg", None),
    "opus": ("OGG", "audio/ogg", "OPUS"),
}


def sentences(text: str) -> list[str]:
    """`text` in sentences, split as vLLM-Omni's WebSocket path splits it (vllm-omni 0.30.0)."""
    from vllm_omni.entrypoints.openai.speech_text_splitter import SpeechTextSplitter

    splitter = SpeechTextSplitter("sentence")
    return [unit for unit in (*splitter.feed(text), *splitter.flush()) if unit.strip()]


def split_input(text: str, max_chars: int) -> list[str] | None:
    """Consecutive sentences packed into parts of at most `max_chars`; None when a single
    sentence is longer than that (nothing to split it at)."""
    parts: list[str] = []
    current = ""
    for unit in sentences(text):
        unit = unit.strip()
        if len(unit) > max_chars:
            return None
        joined = f"{current} {unit}" if current else unit
        if len(joined) <= max_chars:
            current = joined
        else:
            parts.append(current)
            current = unit
    if current:
        parts.append(current)
    return parts


async def long_parts(fields: dict[str, Any], limits: AdmissionLimits) -> list[str] | None:
    """The parts a long `input` is spoken in, None when it is short enough for one request.

    Raises BadBody for a long input this server does not split (streamed, a sentence
    longer than the input limit).
    """
    length = input_length(fields)
    if not (limits.max_input_chars and length and length > limits.max_input_chars):
        return None
    most = limits.max_input_chars
    if limits.max_long_input_chars <= most:
        return None  # no splitting: judge_fields refuses it with the limit
    if length > limits.max_long_input_chars:
        raise BadBody(
            400,
            f"input is {length} characters; this server speaks at most "
            f"{limits.max_long_input_chars} in one request, in sentences of at most {most} "
            "(split the text into several requests)",
            "input",
            "input_too_long",
        )
    if fields.get("stream"):
        raise BadBody(
            400,
            f"input is {length} characters; a streamed request takes at most {most} (send "
            "long text over the WebSocket /v1/audio/speech/stream, which speaks it in "
            "sentences, or do not stream it)",
            "input",
            "input_too_long",
        )
    parts = await asyncio.to_thread(split_input, str(fields["input"]), most)
    if parts is None:
        raise BadBody(
            400,
            f"input has a sentence over {most} characters; this server speaks long input "
            "in sentences (end sentences sooner, or split the text into several requests)",
            "input",
            "input_too_long",
        )
    return parts


def encode(pcm: bytes, response_format: str, rate: int) -> tuple[bytes, str]:
    """Joined 16-bit mono PCM as the requested format: (bytes, media type)."""
    import numpy as np
    import soundfile

    file_format, media_type, subtype = FORMATS[response_format]
    if file_format == "RAW":
        return pcm, media_type
    samples = np.frombuffer(pcm, dtype=np.int16)
    buffer = io.BytesIO()
    options = {"subtype": subtype} if subtype else {}
    soundfile.write(buffer, samples, rate, format=file_format, **options)
    return buffer.getvalue(), media_type


class Collected:
    """A `send` that keeps a whole response (a part of a long input's answer)."""

    def __init__(self) -> None:
        self.status = 0
        self.messages: list[Message] = []

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = int(message["status"])
        self.messages.append(message)

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.messages if "body" in m)

    async def forward(self, send: Send) -> None:
        for message in self.messages:
            await send(message)


async def speak_in_parts(
    answer: Answer,
    scope: Scope,
    receive: Receive,
    send: Send,
    fields: dict[str, Any],
    parts: list[str],
    timeout_s: float,
) -> None:
    """Each part asked of the server as PCM, in turn; the audio joined into one answer."""
    response_format = str(fields.get("response_format") or "wav")
    rate = reply_sample_rate(fields)
    if response_format not in FORMATS:
        response_format = "wav"  # the server's own answer to a format it does not know
    pcm: list[bytes] = []
    for part in parts:
        asked = {**fields, "input": part, "response_format": "pcm", "stream": False}
        body = json.dumps(asked).encode()
        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
        part_scope = {
            **scope,
            "headers": [*headers, (b"content-length", str(len(body)).encode())],
        }
        reply = Collected()
        await answer(part_scope, replay(body, receive), reply.send, timeout_s)
        if reply.status != 200:
            await reply.forward(send)  # the part's error is the request's
            return
        pcm.append(reply.body)
    data, media_type = await asyncio.to_thread(encode, b"".join(pcm), response_format, rate)
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", media_type.encode()),
                (b"content-length", str(len(data)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})
