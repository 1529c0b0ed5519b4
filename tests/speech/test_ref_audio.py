"""Reference audio is read at any rate and channel count, resampled to 24 kHz, and checked."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile

from omni_cpu.errors import InputError
from omni_cpu.speech.ref_audio import decode_reference_audio, read_reference_audio, resample


def _voice_like(seconds: float, rate: int, channels: int = 1) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    tone = 0.3 * np.sin(2 * np.pi * 220 * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))
    return np.stack([tone] * channels, axis=1) if channels > 1 else tone


def _write(path: Path, samples: np.ndarray, rate: int, subtype: str = "PCM_16") -> Path:
    soundfile.write(str(path), samples, rate, subtype=subtype)
    return path


def test_a_44k_stereo_wav_becomes_24k_mono_of_the_same_length(tmp_path):
    path = _write(tmp_path / "stereo.wav", _voice_like(3.0, 44100, 2), 44100)
    audio = read_reference_audio(path)
    assert audio.original_rate == 44100 and audio.original_channels == 2
    assert audio.samples.ndim == 1 and audio.samples.dtype == np.float32
    assert audio.samples.size == 72000 and audio.seconds == pytest.approx(3.0)
    assert audio.code_frames == 38  # ceil(72000 / 1920)


def test_resampling_keeps_a_tone_at_its_pitch_and_level():
    rate_in, rate_out = 16000, 24000
    tone = np.sin(2 * np.pi * 440 * np.arange(rate_in) / rate_in).astype(np.float32)
    out = resample(tone, rate_in, rate_out)
    spectrum = np.abs(np.fft.rfft(out))
    assert out.size == rate_out
    assert np.argmax(spectrum) == 440  # 1 s of signal: bin k is k Hz
    assert np.sqrt(np.mean(out**2)) == pytest.approx(np.sqrt(0.5), rel=0.02)


def test_a_flac_file_reads_too(tmp_path):
    path = _write(tmp_path / "voice.flac", _voice_like(2.0, 22050), 22050)
    assert read_reference_audio(path).samples.size == 48000


@pytest.mark.parametrize(
    ("seconds", "words"),
    [(0.5, "too short"), (31.0, "too long")],
)
def test_clips_outside_1_to_30_seconds_are_refused(tmp_path, seconds, words):
    path = _write(tmp_path / "clip.wav", _voice_like(seconds, 8000), 8000)
    with pytest.raises(InputError, match=words):
        read_reference_audio(path)


def test_a_silent_clip_is_refused(tmp_path):
    path = _write(tmp_path / "silence.wav", np.zeros(48000), 24000)
    with pytest.raises(InputError, match="silent"):
        read_reference_audio(path)


def test_a_file_that_is_not_audio_is_a_one_line_error(tmp_path):
    path = tmp_path / "notes.wav"
    path.write_text("these are not samples")
    with pytest.raises(InputError, match="cannot read reference audio") as refused:
        read_reference_audio(path)
    assert "\n" not in refused.value.one_line()


def test_a_missing_file_says_so(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        read_reference_audio(tmp_path / "nope.wav")


def _silent_flac(path: Path, seconds: int, rate: int, channels: int) -> bytes:
    """A small FLAC that declares `seconds` of silence (silence compresses to almost nothing)."""
    block = np.zeros((rate, channels), dtype=np.int16)
    with soundfile.SoundFile(
        str(path), "w", rate, channels, subtype="PCM_16", format="FLAC"
    ) as sound:
        for _ in range(seconds):
            sound.write(block)
    return path.read_bytes()


def test_a_small_file_declaring_minutes_of_audio_is_refused_before_decoding(tmp_path):
    import tracemalloc

    data = _silent_flac(tmp_path / "bomb.flac", 300, 48000, 2)  # 110 MB of float32 decoded
    assert len(data) < 2_000_000
    tracemalloc.start()
    try:
        with pytest.raises(InputError, match=r"too long \(300\.0 s declared\)"):
            decode_reference_audio("in ref_audio", data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 5_000_000  # nothing near the declared length was decoded


def test_a_clip_with_more_channels_than_a_voice_needs_is_refused(tmp_path):
    path = _write(tmp_path / "surround.wav", _voice_like(2.0, 16000, 8), 16000)
    with pytest.raises(InputError, match="8 channels") as caught:
        read_reference_audio(path)
    assert "mono" in caught.value.one_line()


def test_a_clip_sampled_above_96khz_is_refused(tmp_path):
    path = _write(tmp_path / "ultra.wav", _voice_like(1.5, 192000), 192000)
    with pytest.raises(InputError, match="192000 Hz"):
        read_reference_audio(path)


def test_bytes_that_are_not_audio_say_why_without_naming_a_buffer():
    # libsndfile's message named what it opened: "<_io.BytesIO object at 0x...>".
    with pytest.raises(InputError) as refused:
        decode_reference_audio("ref_audio", b"not audio at all" * 16)
    line = refused.value.one_line()
    assert "cannot read reference audio ref_audio" in line
    assert "BytesIO" not in line and " at 0x" not in line
