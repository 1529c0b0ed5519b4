"""The client examples run as their docstrings say, against `omni-cpu serve` on tiny checkpoints.

One server per kind the docstrings start (CustomVoice for the preset voice and the latency
script, Base for the clone), each bounded as the docstrings bound them (--max-frames; Base
also --accept-frame-limit). The CustomVoice server admits one stream at a time, so the
latency script's second stream meets a 429 and waits out its Retry-After.
"""

from __future__ import annotations

import wave
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.examples.test_examples import example
from tests.helpers.serving import Server, serving_tiny

pytestmark = pytest.mark.e2e
pytest.importorskip("openai")

MAX_FRAMES = "8"


@pytest.fixture(scope="module")
def custom_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("examples-custom")
    yield from serving_tiny(
        folder, "custom-voice", 2, "--max-frames", MAX_FRAMES, "--max-in-flight", "1"
    )


@pytest.fixture(scope="module")
def base_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("examples-base")
    yield from serving_tiny(folder, "base", 2, "--max-frames", MAX_FRAMES, "--accept-frame-limit")


@pytest.fixture(scope="module")
def reference_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 s of a voice-like tone, as a Base request's reference."""
    import numpy as np
    import soundfile

    t = np.arange(48000) / 24000
    path = tmp_path_factory.mktemp("reference") / "voice.wav"
    soundfile.write(str(path), 0.3 * np.sin(2 * np.pi * 180 * t), 24000, subtype="PCM_16")
    return path


def frames_in(path: Path) -> int:
    with wave.open(str(path)) as handle:
        assert handle.getframerate() == 24000
        return handle.getnframes()


@pytest.mark.parametrize(
    "voice", [("--voice", "vivian"), ("--voice", "vivian", "--instructions", "Cheerfully.")]
)
def test_openai_client_speaks_a_preset_voice(custom_server, tmp_path, voice):
    out = tmp_path / "speech.wav"
    done = example(
        "openai_client.py", "--base-url", custom_server.url("/v1"), *voice, "--out", str(out)
    )
    assert done.returncode == 0, done.stderr[-2000:] + custom_server.log_tail()
    assert "first audio after" in done.stdout and frames_in(out) > 0


def test_stream_latency_waits_out_the_429_above_the_servers_limit(custom_server):
    done = example(
        "stream_latency.py", "--url", custom_server.url(""), "--concurrency", "1,2",
        "--max-new-tokens", MAX_FRAMES,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:] + custom_server.log_tail()
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["1 stream(s)", "2 stream(s)"]
    assert "waited for a 429" in lines[1], lines


def test_openai_client_clones_a_voice(base_server, reference_wav, tmp_path):
    out = tmp_path / "clone.wav"
    done = example(
        "openai_client.py", "--base-url", base_server.url("/v1"), "--ref-audio", str(reference_wav),
        "--ref-text", "What it says.", "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:] + base_server.log_tail()
    assert frames_in(out) > 0
