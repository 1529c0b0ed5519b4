"""WAV files as the tests read them: 16-bit PCM, 24 kHz, whole 12.5 Hz codec frames."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np

FRAME = 1920  # samples per 12.5 Hz codec frame at 24 kHz


def read_wav(path: Path) -> tuple[int, int, np.ndarray]:
    """(sample rate, channels, float samples) of a 16-bit PCM WAV."""
    with wave.open(str(path), "rb") as handle:
        assert handle.getsampwidth() == 2
        data = handle.readframes(handle.getnframes())
        rate, channels = handle.getframerate(), handle.getnchannels()
    return rate, channels, np.frombuffer(data, dtype="<i2").astype(np.float32) / 32767.0
