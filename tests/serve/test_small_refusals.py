"""The small refusals a user needs worded: NaN speed, an unreachable budget, a tiny timeout."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from omni_cpu.serve.knobs import AdmissionLimits

pytest.importorskip("prometheus_client")
from omni_cpu.serve.admission import SpeechAdmission
from tests.serve.test_admission import SPEECH, SlowApp, call, run, upload_voice


def _answer(body: dict, limits: AdmissionLimits | None = None) -> tuple[int, dict, SlowApp]:
    inner = SlowApp(released=True)
    app = SpeechAdmission(inner, limits or AdmissionLimits())
    status, raw = run(call(app, "/v1/audio/speech", body))
    return status, json.loads(raw) if status != 200 else {}, inner


def test_a_nan_speed_says_what_speed_takes():
    status, reply, inner = _answer(json.loads(json.dumps({**SPEECH, "speed": float("nan")})))
    error = reply["error"]
    assert status == 400 and error["param"] == "speed" and inner.started == 0
    assert "nan" in error["message"] and "0.25 to 4" in error["message"]


def test_max_new_tokens_past_the_talkers_context_is_refused_saying_the_limit():
    limits = AdmissionLimits(talker_max_model_len=4096)
    status, reply, _ = _answer({**SPEECH, "max_new_tokens": 5000}, limits)
    assert status == 400 and reply["error"]["param"] == "max_new_tokens"
    assert "4096" in reply["error"]["message"]
    assert _answer({**SPEECH, "max_new_tokens": 2000}, limits)[0] == 200


class PromptApp(SlowApp):
    """Answers 200 a tenth of a second after it is asked: sooner than the deadline watch."""

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        await asyncio.sleep(0.1)
        self.release.set()
        await super().__call__(scope, receive, send)


def test_a_timeout_shorter_than_the_deadline_watch_is_honoured():
    app = SpeechAdmission(PromptApp(), AdmissionLimits())
    status, raw = run(call(app, "/v1/audio/speech", {**SPEECH, "timeout": 1e-9}))
    assert status == 504 and "deadline" in json.loads(raw)["error"]["message"]
    assert app.in_flight == 0


class UnknownVoiceApp(SlowApp):
    """Answers as vLLM-Omni 0.30.0 does a Base request naming a voice it does not have."""

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        await receive()
        message = "Base task with built-in speaker 'nobody' requires 'ref_audio' for voice cloning"
        body = json.dumps({"error": {"message": message, "type": "BadRequestError"}}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 400, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def test_an_unknown_base_voice_says_no_such_voice_and_what_to_send():
    app = SpeechAdmission(UnknownVoiceApp(), AdmissionLimits())
    body = {**SPEECH, "task_type": "Base", "voice": "nobody"}
    status, raw = run(call(app, "/v1/audio/speech", body))
    message = json.loads(raw)["error"]["message"]
    assert status == 400 and "voice 'nobody' is not a voice this server has" in message
    assert "POST /v1/audio/voices" in message and "built-in" not in message


class FullDiskApp(SlowApp):
    """Answers a voice upload as vLLM-Omni 0.30.0 does when its disk is full."""

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        await receive()
        message = "Failed to save voice: [Errno 28] No space left on device: '/srv/voices/a.wav'"
        body = json.dumps({"error": {"message": message, "type": "BadRequestError"}}).encode()
        await send({"type": "http.response.start", "status": 400, "headers": []})
        await send({"type": "http.response.body", "body": body})


def test_a_full_disk_is_a_400_without_the_os_text_or_the_servers_paths():
    app = SpeechAdmission(FullDiskApp(), AdmissionLimits())
    sent = upload_voice(app, {"name": "guest", "consent": "c"})
    message = json.loads(sent[1]["body"])["error"]["message"]
    assert sent[0]["status"] == 400 and "no room left" in message
    assert "Errno" not in message and "/srv" not in message
