"""Any JSON value in any field of any route's body gets an answer, 2xx or 4xx, never a 5xx.

Property-based (hypothesis) over admission in process, in front of a server that
answers 200 to whatever it is given: admission either refuses a body (4xx, one line,
naming the field) or lets it through; it never fails on one. Strings include lone
surrogates and control characters, numbers NaN and infinities, values nest, and the
reference fields get URLs of every scheme.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omni_cpu.serve.knobs import AdmissionLimits

pytest.importorskip("prometheus_client")
from omni_cpu.serve.admission import SpeechAdmission
from tests.serve.test_admission import SlowApp, call, upload_voice
from tests.serve.test_stream_guard import STREAM

# Every field vLLM-Omni 0.30.0's speech, batch and session models read, and the aliases.
FIELDS = [
    "input", "model", "voice", "speaker", "instructions", "response_format", "sample_rate",
    "speed", "stream_format", "stream", "task_type", "language", "ref_audio", "ref_text",
    "ref_audio_2", "references", "ambient_sound", "duration_seconds", "x_vector_only_mode",
    "speaker_embedding", "max_new_tokens", "seed", "initial_codec_chunk_frames",
    "non_streaming_mode", "extra_params", "word_timestamps", "timeout", "items",
]  # fmt: skip
REFERENCES = [
    "data:audio/wav;base64,UklGRg==",
    "data:text/plain;base64,aGk=",
    "data:audio/wav,plain",
    "http://127.0.0.1:9/x.wav",
    "http:/127.0.0.1/x",
    "https://[::1",
    "file:/etc/passwd",
    "file:///etc/passwd",
    "ftp://example.com/x.wav",
]
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Hostile text is rare among random strings: offer it as often as the rest.
HOSTILE = ["\ud800abc", "\udfff", "a\x00b", "ryan\r\nX: 1", "\x1b[31m", "\x85"]
any_text = st.text(st.characters(codec=None, exclude_categories=()), max_size=12) | st.sampled_from(
    HOSTILE
)
# No subnormal floats: a test before this one in the same process may have loaded torch or
# the kernels, which set the CPU to flush them to zero, and hypothesis refuses to draw them
# then. JSON numbers that small are judged by the same code as any other float.
scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_subnormal=False)
    | any_text
    | st.sampled_from(REFERENCES)
)  # fmt: skip
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(any_text, inner, max_size=3),
    max_leaves=8,
)
bodies = st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=6)


def _dumps(value: Any) -> str:
    return json.dumps(value)  # NaN as JSON's NaN, surrogates escaped: valid for Python's parser


class EncodingApp(SlowApp):
    """Stands in for vLLM-Omni: what reaches it is encoded for the engine as UTF-8, and a
    string that cannot be (a lone surrogate) is the 500 vLLM-Omni's dispatch would give."""

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        message = await receive()
        try:
            json.dumps(json.loads(message.get("body") or b"{}"), ensure_ascii=False).encode()
        except UnicodeEncodeError:
            await send({"type": "http.response.start", "status": 500, "headers": []})
            await send({"type": "http.response.body", "body": b"Internal Server Error"})
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"audio"})


def _status(path: str, body: dict[str, Any]) -> int:
    app = SpeechAdmission(EncodingApp(), AdmissionLimits(max_in_flight=4))
    status, _ = asyncio.run(asyncio.wait_for(call(app, path, json.loads(_dumps(body))), 10))
    assert app.in_flight == 0
    return status


@SETTINGS
@given(bodies)
def test_any_speech_body_is_answered_2xx_or_4xx(body: dict[str, Any]):
    assert _status("/v1/audio/speech", {"input": "Hi.", **body}) < 500


@SETTINGS
@given(bodies, st.lists(bodies, max_size=3))
def test_any_batch_body_is_answered_2xx_or_4xx(body: dict[str, Any], items: list):
    assert _status("/v1/audio/speech/batch", {**body, "items": items}) < 500


@SETTINGS
@given(bodies, st.lists(json_values, max_size=3))
def test_any_websocket_session_is_served_or_closed_with_a_reason(config: dict, texts: list):
    inbox = [{"type": "websocket.connect"}] + [
        {"type": "websocket.receive", "text": _dumps(message)}
        for message in [
            {**config, "type": "session.config"},
            *({"type": "input.text", "text": text} for text in texts),
        ]
    ]
    crashed: list[str] = []
    sent: list[dict] = []

    async def receive() -> dict:
        if inbox:
            return inbox.pop(0)
        return {"type": "websocket.disconnect", "code": 1000}

    async def send(message: dict) -> None:
        sent.append(message)

    async def handler(scope: dict, rcv: Any, snd: Any) -> None:
        """vLLM-Omni's handler, as far as encoding what it is given for the engine."""
        await rcv()
        await snd({"type": "websocket.accept"})
        while (message := await rcv())["type"] != "websocket.disconnect":
            try:
                json.dumps(json.loads(message["text"]), ensure_ascii=False).encode()
            except UnicodeEncodeError as error:  # vLLM-Omni's "Internal error"
                crashed.append(str(error))

    app = SpeechAdmission(handler, AdmissionLimits(max_in_flight=4))
    scope = {"type": "websocket", "path": STREAM, "headers": []}
    asyncio.run(asyncio.wait_for(app(scope, receive, send), 10))
    closes = [m["code"] for m in sent if m["type"] == "websocket.close"]
    assert all(code in (1008, 1009, 1013) for code in closes), closes
    assert not crashed
    assert app.in_flight == 0


@SETTINGS
@given(st.dictionaries(st.sampled_from(["name", "consent", "ref_text", "speaker_description",
                                        "speaker_embedding"]), any_text, max_size=5))  # fmt: skip
def test_any_voice_upload_form_is_answered_2xx_or_4xx(fields: dict[str, str]):
    safe = {
        k: v.encode("utf-8", "surrogatepass").decode("utf-8", "replace") for k, v in fields.items()
    }
    safe = {k: v.replace("\r", "").replace("\n", "") for k, v in safe.items()}
    app = SpeechAdmission(SlowApp(released=True), AdmissionLimits())
    sent = upload_voice(app, safe)
    assert sent[0]["status"] < 500 and app.in_flight == 0
