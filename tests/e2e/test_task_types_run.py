"""`omni-cpu run` for VoiceDesign and Base (voice clone) on tiny checkpoints of those kinds.

Two engine runs (about a minute each on 2 cores): VoiceDesign streaming with an
instruction, Base cloning a reference WAV this test writes itself at 44.1 kHz stereo
(so reading, mixing down and resampling are on the path). CustomVoice runs in
test_run.py. The mismatch errors start no engine.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.helpers.audio import FRAME, read_wav
from tests.helpers.engines import Run, needs_runtime, run_omni_cpu

MAX_FRAMES = "12"


@pytest.fixture(scope="module")
def kinds(tiny_kinds: dict[str, Path]) -> dict[str, Path]:
    return tiny_kinds


@pytest.fixture(scope="module")
def reference_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2.5 s of a voice-like tone, 44.1 kHz stereo 16-bit: not the model's rate or layout."""
    import soundfile

    rate = 44100
    t = np.arange(int(2.5 * rate)) / rate
    voice = 0.3 * np.sin(2 * np.pi * 180 * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 4 * t))
    path = tmp_path_factory.mktemp("ref") / "voice.wav"
    soundfile.write(str(path), np.stack([voice, 0.8 * voice], axis=1), rate, subtype="PCM_16")
    return path


def _run(model: Path, out: Path, *extra: str) -> Run:
    return run_omni_cpu(
        "run", "--model", str(model), "--text", "Hello from the CPU.",
        "--max-frames", MAX_FRAMES, "--out", str(out), "--json", *extra,
    )  # fmt: skip


def _check_audio(path: Path) -> None:
    rate, channels, samples = read_wav(path)
    assert (rate, channels) == (24000, 1)
    assert samples.size and samples.size % FRAME == 0
    assert np.isfinite(samples).all() and float(np.abs(samples).max()) > 1e-3


@pytest.mark.e2e
@needs_runtime
def test_voice_design_streams_whole_frames_of_sound(kinds, tmp_path):
    out = tmp_path / "designed.wav"
    run = _run(kinds["voice-design"], out, "--instruct", "A deep, calm voice.", "--stream")
    assert run.returncode == 0, run.stderr[-3000:]
    _check_audio(out)
    assert run.json()["ttfa_s"] is not None


@pytest.mark.e2e
@needs_runtime
def test_base_clones_a_44k_stereo_reference(kinds, reference_wav, tmp_path):
    out = tmp_path / "cloned.wav"
    run = _run(kinds["base"], out, "--ref-audio", str(reference_wav), "--ref-text", "A test clip.")
    assert run.returncode == 0, run.stderr[-3000:]
    _check_audio(out)


@pytest.mark.parametrize(
    ("kind", "extra", "words"),
    [
        ("base", ("--speaker", "ryan", "--ref-audio", "REF", "--ref-text", "x"), "--speaker is"),
        ("base", ("--ref-audio", "REF"), "--ref-text is needed"),
        ("base", (), "needs --ref-audio"),
        ("voice-design", (), "needs --instruct"),
        ("voice-design", ("--instruct", "x", "--ref-audio", "REF"), "--ref-audio is for Base"),
        ("base", ("--query-type", "CustomVoice"), "does not fit this model"),
    ],
)
def test_a_mismatch_is_one_line_exit_2_before_any_engine(
    kinds, reference_wav, tmp_path, kind, extra, words
):
    args = [str(reference_wav) if word == "REF" else word for word in extra]
    run = _run(kinds[kind], tmp_path / "x.wav", *args)
    assert run.returncode == 2
    (line,) = run.stderr.strip().splitlines()
    assert words in line
    assert not (tmp_path / "x.wav").exists()


def test_unreadable_and_silent_references_are_one_line_exit_2(kinds, tmp_path):
    import soundfile

    bad = tmp_path / "bad.wav"
    bad.write_text("not audio")
    silent = tmp_path / "silent.wav"
    soundfile.write(str(silent), np.zeros(48000), 24000)
    short = tmp_path / "short.wav"
    soundfile.write(str(short), 0.3 * np.ones(4000), 8000)
    for path, words in ((bad, "cannot read"), (silent, "silent"), (short, "too short")):
        run = _run(kinds["base"], tmp_path / "x.wav", "--ref-audio", str(path), "--ref-text", "x")
        assert run.returncode == 2, run.stderr
        (line,) = run.stderr.strip().splitlines()
        assert words in line
