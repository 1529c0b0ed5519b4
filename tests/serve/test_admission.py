"""The admission middleware: bounded speech requests, input length, draining, as ASGI sees them."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from omni_cpu.errors import SettingError
from omni_cpu.serve.knobs import AdmissionLimits

# The middleware runs inside vLLM's server and uses its Prometheus client.
pytest.importorskip("prometheus_client")
from omni_cpu.serve.admission import SpeechAdmission

SPEECH = {"model": "m", "input": "Hello there.", "voice": "ryan"}


class SlowApp:
    """Stands in for vLLM-Omni: answers 200 with the body it was given, once released."""

    def __init__(self, released: bool = False) -> None:
        self.release = asyncio.Event()
        if released:
            self.release.set()
        self.started = 0
        self.bodies: list[bytes] = []

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        self.started += 1
        message = await receive()
        self.bodies.append(message.get("body", b""))
        await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"audio"})


async def call(
    app: Any, path: str, body: dict | None = None, method: str = "POST"
) -> tuple[int, bytes]:
    """One request through `app`; its status and body."""
    raw = json.dumps(body).encode() if body is not None else b""
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": raw, "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "path": path, "method": method, "headers": []}
    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def run(coro: Any) -> Any:
    # A hang guard, not a speed bound: a busy box's first long-input split imports
    # vLLM-Omni's splitter in a thread, which took over 10 s beside other work.
    return asyncio.run(asyncio.wait_for(coro, timeout=120))


def test_requests_past_the_limit_get_429_with_a_json_error():
    async def scenario() -> list[tuple[int, bytes]]:
        inner = SlowApp()
        app = SpeechAdmission(inner, AdmissionLimits(max_in_flight=2))
        tasks = [asyncio.create_task(call(app, "/v1/audio/speech", SPEECH)) for _ in range(5)]
        while inner.started < 2:
            await asyncio.sleep(0)
        done, _ = await asyncio.wait(tasks, timeout=0.2)
        refused = [task.result() for task in done]
        inner.release.set()
        admitted = [await task for task in tasks if task not in done]
        return refused + admitted

    results = run(scenario())
    statuses = sorted(status for status, _ in results)
    assert statuses == [200, 200, 429, 429, 429]
    error = json.loads(next(body for status, body in results if status == 429))["error"]
    assert error["code"] == 429 and "capacity" in error["message"]


def test_a_finished_request_frees_its_slot():
    async def scenario() -> list[int]:
        inner = SlowApp(released=True)
        app = SpeechAdmission(inner, AdmissionLimits(max_in_flight=1))
        first = await call(app, "/v1/audio/speech", SPEECH)
        second = await call(app, "/v1/audio/speech", SPEECH)
        assert app.in_flight == 0
        return [first[0], second[0]]

    assert run(scenario()) == [200, 200]


def test_over_long_input_gets_400_naming_the_limit():
    inner = SlowApp()
    app = SpeechAdmission(inner, AdmissionLimits(max_input_chars=10))
    status, body = run(call(app, "/v1/audio/speech", {**SPEECH, "input": "x" * 11}))
    assert status == 400
    error = json.loads(body)["error"]
    assert error["param"] == "input" and "at most 10" in error["message"]
    assert inner.started == 0


def test_admitted_request_reaches_the_server_with_its_body_intact():
    inner = SlowApp(released=True)
    app = SpeechAdmission(inner, AdmissionLimits(max_input_chars=100))
    status, _ = run(call(app, "/v1/audio/speech", SPEECH))
    assert status == 200
    assert json.loads(inner.bodies[0]) == SPEECH


def test_draining_refuses_new_speech_and_fails_health(tmp_path: Path):
    flag = tmp_path / "draining"
    inner = SlowApp(released=True)
    app = SpeechAdmission(inner, AdmissionLimits(drain_file=str(flag)))
    assert run(call(app, "/health", method="GET"))[0] == 200
    flag.touch()
    assert run(call(app, "/v1/audio/speech", SPEECH))[0] == 503
    assert run(call(app, "/health", method="GET"))[0] == 503


def test_endpoints_without_engine_work_are_not_counted_or_limited():
    inner = SlowApp(released=True)
    app = SpeechAdmission(inner, AdmissionLimits(max_in_flight=1, max_input_chars=1))
    app.in_flight = 1  # full
    assert run(call(app, "/v1/models", method="GET"))[0] == 200
    assert run(call(app, "/v1/audio/voices", method="GET"))[0] == 200
    assert run(call(app, "/v1/audio/voices/alice", method="DELETE"))[0] == 200


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/audio/generate", "/v1/omni/sleep"])
def test_routes_that_are_not_speech_get_404_before_the_server(path: str):
    inner = SlowApp(released=True)
    app = SpeechAdmission(inner, AdmissionLimits())
    status, raw = run(call(app, path, SPEECH))
    assert status == 404 and "not served by omni-cpu serve" in json.loads(raw)["error"]["message"]
    assert inner.started == 0


def test_limits_come_from_the_environment():
    limits = AdmissionLimits.from_env(
        {
            "OMNI_CPU_SERVE_MAX_IN_FLIGHT": "12",
            "OMNI_CPU_SERVE_MAX_INPUT_CHARS": "300",
            "OMNI_CPU_SERVE_DRAIN_FILE": "/x/draining",
        }
    )
    assert limits == AdmissionLimits(
        max_in_flight=12, max_input_chars=300, drain_file="/x/draining"
    )


def test_a_limit_the_server_cannot_read_is_refused_not_read_as_no_limit():
    with pytest.raises(SettingError, match="OMNI_CPU_SERVE_MAX_INPUT_CHARS='oops'"):
        AdmissionLimits.from_env({"OMNI_CPU_SERVE_MAX_INPUT_CHARS": "oops"})


CLONE = {
    "model": "m",
    "input": "Hello there.",
    "task_type": "Base",
    "ref_text": "A test clip.",
}


def test_a_ref_audio_url_is_400_unless_the_server_allows_fetching():
    body = {**CLONE, "ref_audio": "https://example.com/voice.wav"}
    inner = SlowApp(released=True)
    status, raw = run(call(SpeechAdmission(inner, AdmissionLimits()), "/v1/audio/speech", body))
    error = json.loads(raw)["error"]
    assert status == 400 and error["param"] == "ref_audio"
    assert "--allow-ref-audio-urls" in error["message"] and inner.started == 0

    # Allowed hosts are fetched by admission (tests/serve/test_ref_audio_fetch.py).
    allowed = SpeechAdmission(SlowApp(released=True), AdmissionLimits(allow_ref_audio_urls="*"))
    loopback = {**body, "ref_audio": "http://127.0.0.1:9/voice.wav"}
    status, raw = run(call(allowed, "/v1/audio/speech", loopback))
    assert status == 400 and "loopback" in json.loads(raw)["error"]["message"]


def _wav_url(seconds: float, amplitude: float = 0.3, rate: int = 16000) -> str:
    """A base64 WAV data URL of a 200 Hz tone, as clients send `ref_audio`."""
    import base64
    import io

    import numpy as np
    import soundfile

    t = np.arange(int(seconds * rate)) / rate
    buffer = io.BytesIO()
    soundfile.write(buffer, amplitude * np.sin(2 * np.pi * 200 * t), rate, format="WAV")
    return "data:audio/wav;base64," + base64.b64encode(buffer.getvalue()).decode()


def test_base64_ref_audio_reaches_the_server_unchanged():
    body = {**CLONE, "ref_audio": _wav_url(2.0)}
    inner = SlowApp(released=True)
    status, _ = run(call(SpeechAdmission(inner, AdmissionLimits()), "/v1/audio/speech", body))
    assert status == 200 and json.loads(inner.bodies[0]) == body


@pytest.mark.parametrize(
    ("ref_audio", "words"),
    [
        (lambda: _wav_url(2.0, amplitude=0.0), "is silent"),
        (lambda: _wav_url(0.5), "too short"),
        (lambda: _wav_url(31.0), "too long"),
        (lambda: "data:audio/wav;base64,UklGRg==", "cannot read reference audio"),
        (lambda: "data:audio/wav;base64,not base64!", "not valid base64"),
    ],
)
def test_base64_ref_audio_run_would_refuse_is_400_before_the_server(ref_audio, words):
    body = {**CLONE, "ref_audio": ref_audio()}
    inner = SlowApp(released=True)
    status, raw = run(call(SpeechAdmission(inner, AdmissionLimits()), "/v1/audio/speech", body))
    error = json.loads(raw)["error"]
    assert status == 400 and error["param"] == "ref_audio" and inner.started == 0
    assert words in error["message"] and "\n" not in error["message"]


def test_a_down_stage_fails_health_and_speech_with_its_name(tmp_path: Path):
    down = tmp_path / "stage-down"
    inner = SlowApp(released=True)
    app = SpeechAdmission(inner, AdmissionLimits(down_file=str(down)))
    assert run(call(app, "/health", method="GET"))[0] == 200
    down.write_text("stage 0 (talker) worker pid 123 died\n")
    status, body = run(call(app, "/health", method="GET"))
    assert status == 503
    assert "stage 0 (talker) worker pid 123 died" in json.loads(body)["error"]["message"]
    assert run(call(app, "/v1/audio/speech", SPEECH))[0] == 503
    assert inner.started == 1  # only the /health answered before the stage went down


def test_a_prompt_over_the_talkers_context_gets_400_with_the_limit(
    tiny_checkpoint: Path,
):
    pytest.importorskip("vllm_omni", reason="the prompt estimate is vLLM-Omni's")
    inner = SlowApp(released=True)
    limits = AdmissionLimits(talker_max_model_len=64, tokenizer=str(tiny_checkpoint))
    app = SpeechAdmission(inner, limits)
    # Under any character cap, over 64 positions: emoji take several tokens each.
    status, body = run(call(app, "/v1/audio/speech", {**SPEECH, "input": "😀" * 40}))
    assert status == 400
    error = json.loads(body)["error"]
    assert error["param"] == "input" and "context is 64" in error["message"]
    assert inner.started == 0
    assert run(call(app, "/v1/audio/speech", {**SPEECH, "input": "Hi."}))[0] == 200


def test_a_body_over_the_size_limit_is_413_before_the_server():
    inner = SlowApp(released=True)
    app = SpeechAdmission(inner, AdmissionLimits(max_body_bytes=1000))
    status, raw = run(call(app, "/v1/audio/speech", {**SPEECH, "junk": "x" * 2000}))
    error = json.loads(raw)["error"]
    assert status == 413 and error["code"] == 413 and "1000 byte limit" in error["message"]
    assert inner.started == 0
    assert run(call(app, "/v1/audio/speech", SPEECH))[0] == 200


async def call_raw(app: Any, path: str, raw: bytes) -> tuple[int, bytes]:
    """One POST of `raw` bytes through `app`; its status and body."""
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": raw, "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "path": path, "method": "POST", "headers": []}
    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


@pytest.mark.parametrize("path", ["/v1/audio/speech", "/v1/audio/speech/batch"])
@pytest.mark.parametrize("depth", [2000, 100])
def test_deeply_nested_json_is_400_not_a_recursion_error(path: str, depth: int):
    inner = SlowApp(released=True)
    app = SpeechAdmission(inner, AdmissionLimits())
    status, raw = run(call_raw(app, path, b"[" * depth + b"]" * depth))
    error = json.loads(raw)["error"]
    assert status == 400 and "nests deeper" in error["message"] and inner.started == 0


def _wav_file(path: Path, seconds: float, amplitude: float = 0.3, nan: bool = False) -> Path:
    import numpy as np
    import soundfile

    rate = 16000
    samples = amplitude * np.sin(2 * np.pi * 200 * np.arange(int(seconds * rate)) / rate)
    if nan:
        samples[100] = np.nan
    soundfile.write(path, samples, rate, format="WAV", subtype="FLOAT")
    return path


def test_a_file_ref_audio_under_the_folder_reaches_the_server(tmp_path: Path):
    clip = _wav_file(tmp_path / "voice.wav", 2.0)
    inner = SlowApp(released=True)
    app = SpeechAdmission(inner, AdmissionLimits(ref_audio_dir=str(tmp_path)))
    body = {**CLONE, "ref_audio": clip.as_uri()}
    assert run(call(app, "/v1/audio/speech", body))[0] == 200
    assert json.loads(inner.bodies[0]) == body


@pytest.mark.parametrize(
    ("name", "make", "words"),
    [
        ("missing.wav", None, "does not exist"),
        ("nan.wav", lambda p: _wav_file(p, 2.0, nan=True), "NaN"),
        ("silent.wav", lambda p: _wav_file(p, 2.0, amplitude=0.0), "is silent"),
        ("short.wav", lambda p: _wav_file(p, 0.5), "too short"),
        ("../outside.wav", lambda p: _wav_file(p, 2.0), "outside"),
    ],
)
def test_a_file_ref_audio_run_would_refuse_is_400_before_the_server(
    tmp_path: Path, name: str, make: Any, words: str
):
    folder = tmp_path / "voices"
    folder.mkdir()
    clip = folder / name
    if make is not None:
        make(clip)
    inner = SlowApp(released=True)
    app = SpeechAdmission(inner, AdmissionLimits(ref_audio_dir=str(folder)))
    url = "file://" + str(folder) + "/" + name
    status, raw = run(call(app, "/v1/audio/speech", {**CLONE, "ref_audio": url}))
    error = json.loads(raw)["error"]
    assert status == 400 and error["param"] == "ref_audio" and inner.started == 0
    assert words in error["message"] and "\n" not in error["message"]


def test_a_file_ref_audio_without_a_ref_audio_dir_is_400(tmp_path: Path):
    clip = _wav_file(tmp_path / "voice.wav", 2.0)
    inner = SlowApp(released=True)
    app = SpeechAdmission(inner, AdmissionLimits())
    status, raw = run(call(app, "/v1/audio/speech", {**CLONE, "ref_audio": clip.as_uri()}))
    assert status == 400 and "--ref-audio-dir" in json.loads(raw)["error"]["message"]


def test_a_data_url_that_is_not_base64_is_400():
    inner = SlowApp(released=True)
    app = SpeechAdmission(inner, AdmissionLimits())
    body = {**CLONE, "ref_audio": "data:audio/wav,RIFF1234WAVEfmt"}
    status, raw = run(call(app, "/v1/audio/speech", body))
    error = json.loads(raw)["error"]
    assert status == 400 and error["param"] == "ref_audio" and "base64" in error["message"]
    assert inner.started == 0


class FailingApp:
    """Stands in for vLLM-Omni in the instant after a stage died: 500 'no live replica'."""

    def __init__(self, message: str) -> None:
        self.message = message

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        await receive()
        body = json.dumps({"error": {"message": self.message, "code": 500}}).encode()
        await send({"type": "http.response.start", "status": 500, "headers": []})
        await send({"type": "http.response.body", "body": body})


def test_a_500_in_the_instant_a_stage_dies_becomes_503_naming_it(tmp_path: Path):
    down = tmp_path / "stage-down"

    async def scenario() -> tuple[int, bytes]:
        app = SpeechAdmission(
            FailingApp("stage 0 has no live replica"), AdmissionLimits(down_file=str(down))
        )
        request = asyncio.create_task(call(app, "/v1/audio/speech", SPEECH))
        await asyncio.sleep(0.2)  # the supervisor notices a moment later
        down.write_text("stage 0 (talker) engine core pid 123 died\n")
        return await request

    status, raw = run(scenario())
    error = json.loads(raw)["error"]
    assert status == 503 and "stage 0 (talker) engine core pid 123 died" in error["message"]


def test_a_500_unrelated_to_a_stage_passes_through(tmp_path: Path):
    app = SpeechAdmission(
        FailingApp("something else"), AdmissionLimits(down_file=str(tmp_path / "stage-down"))
    )
    app.down_wait_s = 0.1
    status, raw = run(call(app, "/v1/audio/speech", SPEECH))
    assert status == 500 and json.loads(raw)["error"]["message"] == "something else"


class StreamingApp:
    """Stands in for vLLM-Omni streaming audio: one chunk, then waits forever."""

    def __init__(self) -> None:
        self.cancelled = False

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"chunk", "more_body": True})
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise


async def call_messages(app: Any, body: dict) -> list[dict]:
    """One speech request through `app`; every message it sent."""
    raw = json.dumps(body).encode()
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": raw, "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    await app({"type": "http", "path": "/v1/audio/speech",
               "method": "POST", "headers": []}, receive, send)  # fmt: skip
    return sent


def test_a_request_in_flight_when_a_stage_goes_down_gets_503_not_a_hang(tmp_path: Path):
    down = tmp_path / "stage-down"

    async def scenario() -> tuple[int, bytes]:
        inner = SlowApp()  # never released: the stage it waits on is hung
        app = SpeechAdmission(inner, AdmissionLimits(down_file=str(down)))
        request = asyncio.create_task(call(app, "/v1/audio/speech", SPEECH))
        while inner.started < 1:
            await asyncio.sleep(0.01)
        down.write_text("stage 0 (talker) engine core pid 9 made no progress for 30 s\n")
        result = await request
        assert app.in_flight == 0
        return result

    status, raw = run(scenario())
    assert status == 503 and "made no progress" in json.loads(raw)["error"]["message"]


def test_a_stream_in_flight_when_a_stage_goes_down_is_cut_not_ended(tmp_path: Path):
    down = tmp_path / "stage-down"

    async def scenario() -> list[dict]:
        inner = StreamingApp()
        app = SpeechAdmission(inner, AdmissionLimits(down_file=str(down)))
        request = asyncio.create_task(call_messages(app, SPEECH))
        await asyncio.sleep(0.1)
        down.write_text("stage 0 (talker) died\n")
        sent = await request
        assert inner.cancelled
        return sent

    sent = run(scenario())
    # No final body message: the server closes the connection, the client sees an error.
    assert [m.get("more_body", False) for m in sent if m["type"] == "http.response.body"] == [True]


@pytest.mark.parametrize(
    ("limits", "body"),
    [
        (AdmissionLimits(request_timeout_s=0.3), SPEECH),
        (AdmissionLimits(), {**SPEECH, "timeout": 0.3}),
        (AdmissionLimits(request_timeout_s=600), {**SPEECH, "timeout": 0.3}),
    ],
)
def test_a_request_past_its_deadline_gets_504(limits: AdmissionLimits, body: dict):
    inner = SlowApp()  # never released
    app = SpeechAdmission(inner, limits)
    started = asyncio.run(asyncio.wait_for(_timed(call(app, "/v1/audio/speech", body)), 10))
    (status, raw), seconds = started
    error = json.loads(raw)["error"]
    assert status == 504 and error["code"] == 504 and "0.3 s deadline" in error["message"]
    assert 0.25 <= seconds < 2 and app.in_flight == 0


async def _timed(coro: Any) -> tuple[Any, float]:
    loop = asyncio.get_running_loop()
    start = loop.time()
    result = await coro
    return result, loop.time() - start


def test_a_stream_past_its_deadline_ends_cleanly_with_what_it_had():
    inner = StreamingApp()
    app = SpeechAdmission(inner, AdmissionLimits())
    sent = run(call_messages(app, {**SPEECH, "stream": True, "timeout": 0.3}))
    bodies = [m for m in sent if m["type"] == "http.response.body"]
    assert b"".join(m.get("body", b"") for m in bodies) == b"chunk"
    assert bodies[-1].get("more_body", False) is False and inner.cancelled


@pytest.mark.parametrize("timeout", [0, -1, "soon", True])
def test_a_timeout_field_that_is_not_positive_seconds_is_400(timeout: Any):
    inner = SlowApp(released=True)
    status, raw = run(
        call(
            SpeechAdmission(inner, AdmissionLimits()),
            "/v1/audio/speech",
            {**SPEECH, "timeout": timeout},
        )
    )
    assert status == 400 and json.loads(raw)["error"]["param"] == "timeout" and inner.started == 0


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"temperature": -1}, "extra_params.temperature"),
        ({"temperature": "hot"}, "extra_params.temperature"),
        ({"top_p": 0}, "extra_params.top_p"),
        ({"top_k": 2.5}, "extra_params.top_k"),
        ({"temperature": 2.5}, "extra_params.temperature"),
        ({"temperature": True}, "extra_params.temperature"),
        ({"top_k": -2}, "extra_params.top_k"),
        ({"repetition_penalty": 0}, "extra_params.repetition_penalty"),
        ({"repetition_penalty": "strong"}, "extra_params.repetition_penalty"),
    ],
)
def test_a_sampling_value_the_engine_would_fail_on_is_400_naming_the_field(extra, field):
    inner = SlowApp(released=True)
    app = SpeechAdmission(inner, AdmissionLimits())
    status, raw = run(call(app, "/v1/audio/speech", {**SPEECH, "extra_params": extra}))
    error = json.loads(raw)["error"]
    assert status == 400 and error["param"] == field and field in error["message"]
    assert inner.started == 0


@pytest.mark.parametrize("seed", [-1, 2**63, "7", 1.5, None])
def test_a_seed_that_is_not_a_whole_number_from_0_is_400_naming_it(seed):
    inner = SlowApp(released=True)
    app = SpeechAdmission(inner, AdmissionLimits())
    status, raw = run(call(app, "/v1/audio/speech", {**SPEECH, "seed": seed}))
    if seed is None:  # JSON null: no seed, as vLLM-Omni reads it
        assert status == 200
        return
    error = json.loads(raw)["error"]
    assert status == 400 and error["param"] == "seed" and "seed" in error["message"]
    assert inner.started == 0


def test_a_batch_items_sampling_is_judged_and_named_by_its_place():
    inner = SlowApp(released=True)
    app = SpeechAdmission(inner, AdmissionLimits())
    body = {"items": [{"input": "Hi."}, {"input": "Hi.", "extra_params": {"top_p": 2}}]}
    status, raw = run(call(app, "/v1/audio/speech/batch", {**SPEECH, **body}))
    error = json.loads(raw)["error"]
    assert status == 400 and error["param"] == "items[1].extra_params.top_p"


def test_sampling_values_the_engine_takes_reach_it():
    inner = SlowApp(released=True)
    app = SpeechAdmission(inner, AdmissionLimits())
    extra = {"temperature": 0.7, "top_p": 0.9, "top_k": 50, "repetition_penalty": 1.1}
    body = {**SPEECH, "seed": 7, "extra_params": extra}
    assert run(call(app, "/v1/audio/speech", body))[0] == 200
    greedy = {**SPEECH, "seed": 0, "extra_params": {"temperature": 0, "top_k": 0}}
    assert run(call(app, "/v1/audio/speech", greedy))[0] == 200


def test_a_body_that_does_not_arrive_in_time_is_408_and_holds_no_place():
    async def scenario() -> tuple[int, bytes, int]:
        inner = SlowApp(released=True)
        app = SpeechAdmission(inner, AdmissionLimits(max_in_flight=1, body_timeout_s=0.3))
        sent: list[dict] = []
        seen: list[int] = []

        async def receive() -> dict:
            if not seen:
                seen.append(app.in_flight)
                return {"type": "http.request", "body": b"{", "more_body": True}
            await asyncio.sleep(5)  # the rest never comes
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            sent.append(message)

        scope = {"type": "http", "path": "/v1/audio/speech", "method": "POST", "headers": []}
        slow = asyncio.create_task(app(scope, receive, send))
        await asyncio.sleep(0.1)
        during = await call(app, "/v1/audio/speech", SPEECH)  # the slow one holds no place
        await slow
        status = next(m["status"] for m in sent if m["type"] == "http.response.start")
        return status, during[1], during[0]

    status, _, during = run(scenario())
    assert status == 408 and during == 200


class PcmApp:
    """Stands in for vLLM-Omni: answers each speech request with one frame of PCM per word."""

    def __init__(self) -> None:
        self.inputs: list[str] = []

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        fields = json.loads((await receive())["body"])
        assert fields["response_format"] == "pcm" and not fields["stream"]
        self.inputs.append(fields["input"])
        frame = (len(self.inputs) * 100).to_bytes(2, "little") * 1920  # 16-bit samples
        data = frame * len(fields["input"].split())
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": data})


LONG = "The first sentence is here. A second one follows it. And then a third. The end."


def test_long_input_is_spoken_in_sentences_as_one_wav():
    import io

    soundfile = pytest.importorskip("soundfile")
    inner = PcmApp()
    app = SpeechAdmission(inner, AdmissionLimits(max_input_chars=30, max_long_input_chars=120))
    status, data = run(call(app, "/v1/audio/speech", {**SPEECH, "input": LONG}))
    assert status == 200
    assert inner.inputs == [
        "The first sentence is here.",
        "A second one follows it.",
        "And then a third. The end.",
    ]
    audio, rate = soundfile.read(io.BytesIO(data), dtype="int16")
    assert rate == 24000 and len(audio) == 1920 * len(LONG.split())  # every part, no gap
    assert audio[0] == 100 and audio[-1] == 300  # in order


def test_long_input_over_the_split_limit_is_400_naming_both_limits():
    inner = PcmApp()
    app = SpeechAdmission(inner, AdmissionLimits(max_input_chars=30, max_long_input_chars=60))
    status, raw = run(call(app, "/v1/audio/speech", {**SPEECH, "input": LONG}))
    error = json.loads(raw)["error"]
    assert status == 400 and error["param"] == "input"
    assert "at most 60" in error["message"] and "at most 30" in error["message"]
    assert inner.inputs == []


def test_streamed_long_input_is_400_pointing_at_the_websocket():
    inner = PcmApp()
    app = SpeechAdmission(inner, AdmissionLimits(max_input_chars=30, max_long_input_chars=120))
    status, raw = run(call(app, "/v1/audio/speech", {**SPEECH, "input": LONG, "stream": True}))
    assert status == 400 and "/v1/audio/speech/stream" in json.loads(raw)["error"]["message"]


def test_aac_is_400_saying_why():
    inner = SlowApp(released=True)
    app = SpeechAdmission(inner, AdmissionLimits())
    status, raw = run(call(app, "/v1/audio/speech", {**SPEECH, "response_format": "aac"}))
    error = json.loads(raw)["error"]
    assert status == 400 and error["param"] == "response_format"
    assert "AAC" in error["message"] and "mp3" in error["message"]


def _form(fields: dict[str, str]) -> tuple[bytes, bytes]:
    boundary = "omniboundary"
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
        for k, v in fields.items()
    ]
    body = b"".join(parts) + f"--{boundary}--\r\n".encode()
    return body, f"multipart/form-data; boundary={boundary}".encode()


def upload_voice(app: Any, fields: dict[str, str]) -> list[dict]:
    """One voice upload (a multipart form of `fields`) through `app`; every message it sent."""
    body, content_type = _form(fields)
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    headers = [(b"content-type", content_type)]
    scope = {"type": "http", "path": "/v1/audio/voices", "method": "POST", "headers": headers}
    run(app(scope, receive, send))
    return sent


def test_a_voice_embedding_with_nan_is_400_before_the_server():
    inner = SlowApp(released=True)
    app = SpeechAdmission(inner, AdmissionLimits())
    sent = upload_voice(
        app, {"name": "ghost", "consent": "c", "speaker_embedding": json.dumps([0.1, float("nan")])}
    )
    assert sent[0]["status"] == 400 and inner.started == 0
    assert b"finite" in b"".join(m.get("body", b"") for m in sent[1:])


@pytest.mark.parametrize("frames", [True, 0, -3, 2.5, "12", float("inf")])
def test_a_frame_budget_that_is_not_a_whole_number_from_1_is_400_naming_it(frames):
    # vLLM-Omni's model read `true` as 1 frame: a 500 saying the model made no audio.
    inner = SlowApp(released=True)
    app = SpeechAdmission(inner, AdmissionLimits())
    status, raw = run(call(app, "/v1/audio/speech", {**SPEECH, "max_new_tokens": frames}))
    error = json.loads(raw)["error"]
    assert status == 400 and error["param"] == "max_new_tokens" and inner.started == 0


def test_an_integer_literal_too_long_to_read_is_400_in_the_openai_shape():
    inner = SlowApp(released=True)
    app = SpeechAdmission(inner, AdmissionLimits())
    raw = json.dumps(SPEECH)[:-1] + ', "max_new_tokens": ' + "9" * 5000 + "}"
    status, reply = run(call_raw(app, "/v1/audio/speech", raw.encode()))
    error = json.loads(reply)["error"]
    assert status == 400 and "5000 digits" in error["message"] and inner.started == 0


@pytest.mark.parametrize("field", ["voice", "speaker"])
def test_a_voice_name_longer_than_any_voices_is_400_not_the_os_error(field):
    inner = SlowApp(released=True)
    app = SpeechAdmission(inner, AdmissionLimits())
    status, raw = run(call(app, "/v1/audio/speech", {**SPEECH, field: "v" * 300}))
    error = json.loads(raw)["error"]
    assert status == 400 and error["param"] == field and "300 characters" in error["message"]
    assert inner.started == 0
