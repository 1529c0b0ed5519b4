"""`omni-cpu serve` for Base (voice clone) and VoiceDesign models, end to end on tiny checkpoints.

One server per kind (two engine starts in all). Base takes vLLM-Omni's request fields
for cloning: `ref_audio` as base64 data, `ref_text`, `x_vector_only_mode`; an http(s)
URL is refused unless the server was started with --allow-ref-audio-urls. The
reference WAV is written by the test itself. CustomVoice is test_serve_e2e.py's.
The servers run with --accept-frame-limit: random weights never end a clone on
their own, and vLLM-Omni answers a Base request that reaches its budget with 500.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from tests.helpers.serving import (
    FRAME_SAMPLES,
    SAMPLE_RATE,
    Server,
    TinyServer,
    post_json,
    wav_data_url,
)

pytestmark = pytest.mark.e2e

openai = pytest.importorskip("openai")
soundfile = pytest.importorskip("soundfile")

MAX_FRAMES = 12


def _start(tiny_server: TinyServer, kind: str) -> Server:
    return tiny_server(
        kind, 2, "--max-frames", str(MAX_FRAMES),
        # Random weights never emit end-of-speech: without it every Base request is a 500.
        "--accept-frame-limit",
    )  # fmt: skip


@pytest.fixture(scope="module")
def base_server(tiny_server: TinyServer) -> Server:
    return _start(tiny_server, "base")


@pytest.fixture(scope="module")
def design_server(tiny_server: TinyServer) -> Server:
    return _start(tiny_server, "voice-design")


@pytest.fixture(scope="module")
def reference_data_url() -> str:
    """2 s of a voice-like tone at 16 kHz, as a base64 WAV data URL."""
    return wav_data_url(2.0)


def _speech(server: Server, **fields) -> tuple[int, bytes]:
    body = {"model": server.model, "input": "Hello there.", "response_format": "wav", **fields}
    return post_json(server.url("/v1/audio/speech"), body)


def _check_wav(data: bytes) -> None:
    audio, rate = soundfile.read(io.BytesIO(data), dtype="float32")
    assert rate == SAMPLE_RATE
    assert audio.size and audio.size % FRAME_SAMPLES == 0
    assert np.isfinite(audio).all() and float(np.abs(audio).max()) > 1e-3


def _error(reply: bytes) -> str:
    return json.loads(reply)["error"]["message"]


def test_base_clones_base64_reference_audio_with_its_transcript(base_server, reference_data_url):
    status, reply = _speech(
        base_server, task_type="Base", ref_audio=reference_data_url, ref_text="A test clip."
    )
    assert status == 200, reply[:500]
    _check_wav(reply)


def test_base_x_vector_only_needs_no_transcript(base_server, reference_data_url):
    status, reply = _speech(
        base_server, task_type="Base", ref_audio=reference_data_url, x_vector_only_mode=True
    )
    assert status == 200, reply[:500]
    _check_wav(reply)


def test_base_streams_a_clone_through_the_openai_client(base_server, reference_data_url):
    with base_server.client().audio.speech.with_streaming_response.create(
        model=base_server.model,
        input="Hello there.",
        voice="clone",
        response_format="pcm",
        extra_body={
            "task_type": "Base",
            "ref_audio": reference_data_url,
            "ref_text": "A test clip.",
            "stream": True,
            "stream_format": "audio",
        },
    ) as reply:
        assert reply.status_code == 200
        data = b"".join(reply.iter_bytes())
    assert len(data) and (len(data) // 2) % FRAME_SAMPLES == 0


def test_base_without_a_transcript_is_400(base_server, reference_data_url):
    status, reply = _speech(base_server, task_type="Base", ref_audio=reference_data_url)
    assert status == 400 and "ref_text" in _error(reply)


@pytest.mark.parametrize(
    ("ref_audio", "words"),
    [
        (lambda: wav_data_url(0.5), "too short"),
        (lambda: wav_data_url(31.0), "too long"),
        (lambda: wav_data_url(2.0, amplitude=0.0), "silent"),
        (lambda: "data:audio/wav;base64,UklGRg==", "cannot read"),
    ],
)
def test_a_reference_run_would_refuse_is_400(base_server, ref_audio, words):
    status, reply = _speech(
        base_server, task_type="Base", ref_audio=ref_audio(), ref_text="A test clip."
    )
    assert status == 400 and words in _error(reply)


def test_a_ref_audio_url_is_400_without_allow_ref_audio_urls(base_server):
    status, reply = _speech(
        base_server, task_type="Base", ref_audio="https://example.com/v.wav", ref_text="x"
    )
    assert status == 400 and "--allow-ref-audio-urls" in _error(reply)


def test_a_preset_speaker_on_a_base_model_is_400(base_server):
    status, reply = _speech(base_server, task_type="CustomVoice", voice="ryan")
    assert status == 400 and "Base" in _error(reply)


def test_voice_design_follows_an_instruction(design_server):
    status, reply = _speech(
        design_server, task_type="VoiceDesign", instructions="A deep, calm voice."
    )
    assert status == 200, reply[:500]
    _check_wav(reply)


def test_voice_design_without_an_instruction_is_400(design_server):
    status, reply = _speech(design_server, task_type="VoiceDesign")
    assert status == 400 and "instructions" in _error(reply)
