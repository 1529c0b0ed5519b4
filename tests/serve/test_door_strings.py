"""Every string a request carries is checked at the door, on every route, before the server.

A lone surrogate (valid JSON, `"\\ud800"`) crashes vLLM-Omni's request dispatch and takes
a stage down; control characters are no part of speech text nor of a name. Each is a
400 (a WebSocket: an error event and close 1008) naming the field; the server never
sees the request.
"""

from __future__ import annotations

import json

import pytest

from omni_cpu.serve.asgi import BadBody
from omni_cpu.serve.knobs import AdmissionLimits
from omni_cpu.serve.strings import judge_strings

pytest.importorskip("prometheus_client")
from omni_cpu.serve.admission import SpeechAdmission
from tests.serve.test_admission import SPEECH, SlowApp, call, run, upload_voice
from tests.serve.test_stream_guard import Handler, session


def _refused(body: dict, path: str = "/v1/audio/speech") -> dict:
    inner = SlowApp(released=True)
    status, raw = run(call(SpeechAdmission(inner, AdmissionLimits()), path, body))
    assert status == 400 and inner.started == 0, (status, raw)
    return json.loads(raw)["error"]


@pytest.mark.parametrize("field", ["input", "voice", "instructions", "language", "ref_text"])
def test_a_lone_surrogate_in_any_speech_field_is_400_naming_it(field: str):
    error = _refused({**SPEECH, field: "\ud800abc"})
    assert error["param"] == field and "surrogate" in error["message"]


def test_a_nul_in_the_input_is_400():
    error = _refused({**SPEECH, "input": "Hello\x00there."})
    assert error["param"] == "input" and "U+0000" in error["message"]


def test_line_breaks_are_text_in_the_input_but_not_in_a_voice_name():
    inner = SlowApp(released=True)
    app = SpeechAdmission(inner, AdmissionLimits())
    status, _ = run(call(app, "/v1/audio/speech", {**SPEECH, "input": "One.\r\n\tTwo."}))
    assert status == 200
    assert _refused({**SPEECH, "voice": "ryan\r\nX-Injected: 1"})["param"] == "voice"


def test_a_surrogate_in_a_batch_item_names_the_item():
    body = {"model": "m", "items": [{"input": "Fine."}, {"input": "\udfff"}]}
    error = _refused(body, "/v1/audio/speech/batch")
    assert error["param"] == "items[1].input"


def test_a_surrogate_in_a_field_name_is_400():
    assert "field name" in _refused({**SPEECH, "\ud800": 1})["message"]


def test_a_surrogate_in_a_websocket_message_is_an_error_event_and_a_close():
    handler = Handler()
    app = SpeechAdmission(handler, AdmissionLimits())
    handler.gate = app
    client = session(
        app,
        [
            {"type": "session.config", "voice": "ryan"},
            {"type": "input.text", "text": "Hi \ud800"},
            {"type": "input.done"},
        ],
    )
    errors = [
        json.loads(m["text"])
        for m in client.sent
        if m["type"] == "websocket.send" and "error" in m.get("text", "")
    ]
    assert errors and "text" in errors[0]["message"] and "surrogate" in errors[0]["message"]
    closed = client.closed()
    assert closed is not None and closed[0] == 1008
    assert app.in_flight == 0


def test_a_voice_name_with_a_line_break_is_refused_before_it_is_stored():
    inner = SlowApp(released=True)
    app = SpeechAdmission(inner, AdmissionLimits())
    sent = upload_voice(app, {"name": "evil\r\nname", "consent": "c"})
    assert sent[0]["status"] == 400 and inner.started == 0
    assert json.loads(sent[1]["body"])["error"]["param"] == "name"


def test_valid_unicode_of_every_plane_passes():
    judge_strings({"input": "héllo 你好 🎙️ ‏שלום", "voice": "Vivian"})


def test_a_line_break_in_the_models_own_parameters_is_text():
    judge_strings({"extra_params": {"stop": ["\n"], "nested": {"why": "a\tb"}}})
    with pytest.raises(BadBody, match="U\\+0000"):
        judge_strings({"extra_params": {"stop": ["\x00"]}})
