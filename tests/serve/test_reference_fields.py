"""Every field vLLM-Omni reads reference audio from is in admission's table, and judged there.

Built from vLLM-Omni 0.30.0's own request models (speech, batch and its items, the
WebSocket session config) and its voice upload route: a field that may hold a
reference, or a validator that moves one, fails here until omni_cpu.serve.references
names it — as tests/serve/test_routes.py does for routes.
"""

from __future__ import annotations

import inspect
import json
import re

import pytest

from omni_cpu.serve.checks import judge_fields, judge_ref_audio
from omni_cpu.serve.knobs import AdmissionLimits
from omni_cpu.serve.references import (
    ALIAS_VALIDATORS,
    CHECKING_VALIDATORS,
    REFERENCE_FIELDS,
    Holds,
    audio_values,
)
from tests.helpers.serving import wav_data_url

pytest.importorskip("prometheus_client")
from omni_cpu.serve.admission import SpeechAdmission
from omni_cpu.serve.asgi import BadBody
from tests.serve.test_admission import SPEECH, SlowApp, call, run

# Field names and descriptions that say a string is a reference or its words.
REFERENCE_WORDS = re.compile(r"ref|audio|sample|reference|transcript|clone", re.IGNORECASE)


def request_models() -> list[type]:
    audio = pytest.importorskip("vllm_omni.entrypoints.openai.protocol.audio")
    return [
        audio.OpenAICreateSpeechRequest,
        audio.SpeechBatchItem,
        audio.BatchSpeechRequest,
        audio.StreamingSpeechSessionConfig,
    ]


def named_in_table() -> set[str]:
    return {field.path.partition("[")[0].partition(".")[0] for field in REFERENCE_FIELDS}


def test_every_string_field_that_may_hold_a_reference_is_in_the_table():
    missing = []
    for model in request_models():
        for name, field in model.model_fields.items():
            takes_text = "str" in str(field.annotation) and "dict" not in str(field.annotation)
            about = f"{name} {field.description or ''}"
            if takes_text and REFERENCE_WORDS.search(about) and name not in named_in_table():
                missing.append(f"{model.__name__}.{name}")
    assert not missing, f"reference fields omni_cpu.serve.references does not name: {missing}"


def test_every_validator_of_the_request_models_is_a_known_one():
    unknown = [
        f"{model.__name__}.{name}"
        for model in request_models()
        for name in model.__pydantic_decorators__.model_validators
        if name not in ALIAS_VALIDATORS and name not in CHECKING_VALIDATORS
    ]
    assert not unknown, f"validators that may move a reference, not in the table: {unknown}"


def test_each_alias_lands_where_vllm_omni_reads_reference_audio_and_admission_finds_it():
    speech = request_models()[0]
    for path in ALIAS_VALIDATORS.values():
        key, _, rest = path.partition("[].")
        body = {"input": "Hi.", key: [{rest: "data:audio/wav;base64,U0VOVElORUw="}]}
        found = audio_values(body)
        request = speech.model_validate(json.loads(json.dumps(body)))
        assert request.ref_audio == "data:audio/wav;base64,U0VOVElORUw="
        assert [value for _, value in found] == [request.ref_audio]


def test_the_voice_upload_file_is_in_the_table():
    api = pytest.importorskip("vllm_omni.entrypoints.openai.api_server")
    uploads = {
        name
        for name, parameter in inspect.signature(api.upload_voice).parameters.items()
        if "UploadFile" in str(parameter.annotation)
    }
    table = {field.path for field in REFERENCE_FIELDS if field.holds is Holds.UPLOAD}
    assert uploads and uploads <= table


def _refusal(fields: dict, limits: AdmissionLimits | None = None) -> BadBody:
    limits = limits or AdmissionLimits()
    with pytest.raises(BadBody) as caught:
        judge_fields(fields, limits)
        judge_ref_audio(fields, limits)
    return caught.value


def test_a_references_alias_url_is_refused_like_ref_audio():
    bad = _refusal({"references": [{"audio_path": "http://127.0.0.1:9/x.wav", "text": "Hi."}]})
    assert bad.status == 400 and bad.param == "references[0].audio_path"


def test_a_second_speaker_url_is_refused_too():
    assert _refusal({"ref_audio_2": "https://example.com/x.wav"}).param == "ref_audio_2"


def test_a_list_of_references_is_judged_item_by_item():
    bad = _refusal({"ref_audio": [wav_data_url(2.0), "http://10.0.0.1/x.wav"]})
    assert bad.param == "ref_audio[1]"


def test_a_data_url_that_is_not_audio_is_refused():
    bad = _refusal({"ref_audio": "data:text/plain;base64,aGVsbG8="})
    assert bad.param == "ref_audio" and "text/plain" in str(bad)


def test_an_alias_reference_over_the_duration_limit_is_refused_before_decoding():
    bad = _refusal({"references": [{"audio_path": wav_data_url(40.0, rate=8000)}]})
    assert bad.param == "references[0].audio_path" and "30 s" in str(bad)


def test_a_file_url_with_one_slash_is_judged_by_the_file_policy():
    bad = _refusal({"ref_audio": "file:/etc/passwd"})
    assert "--ref-audio-dir" in str(bad)


def test_the_alias_never_reaches_the_server_with_a_url():
    inner = SlowApp(released=True)
    app = SpeechAdmission(inner, AdmissionLimits())
    body = {
        **SPEECH,
        "task_type": "Base",
        "references": [{"audio_path": "http://127.0.0.1:9/x.wav", "text": "Hi."}],
    }
    status, raw = run(call(app, "/v1/audio/speech", body))
    assert status == 400 and inner.started == 0
    assert json.loads(raw)["error"]["param"] == "references[0].audio_path"
