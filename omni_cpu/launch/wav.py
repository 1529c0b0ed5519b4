"""WAV output that is never left half-written: write a temp file beside it, rename at the end."""

from __future__ import annotations

import os
import tempfile
import wave
from pathlib import Path

import numpy as np

from omni_cpu.launch.request import SAMPLE_RATE


def to_pcm16(samples: np.ndarray) -> bytes:
    """float audio in [-1, 1] -> little-endian 16-bit PCM (clipped)."""
    clipped = np.clip(np.asarray(samples, dtype=np.float32).reshape(-1), -1.0, 1.0)
    return (clipped * 32767.0).round().astype("<i2").tobytes()


class AtomicWavWriter:
    """24 kHz mono 16-bit WAV, appended to as chunks arrive, visible only after `commit`."""

    def __init__(self, path: Path, sample_rate: int = SAMPLE_RATE) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle, temp = tempfile.mkstemp(
            prefix=f".{self.path.name}.", suffix=".partial", dir=self.path.parent
        )
        os.close(handle)
        self._temp = Path(temp)
        # Held open across appends (a context manager would close it): commit/abort close it.
        self._wave = wave.open(str(self._temp), "wb")  # noqa: SIM115
        self._wave.setnchannels(1)
        self._wave.setsampwidth(2)
        self._wave.setframerate(sample_rate)
        self.samples = 0

    def append(self, samples: np.ndarray) -> None:
        """Add float samples; the header's length is rewritten on each write."""
        data = to_pcm16(samples)
        self._wave.writeframes(data)
        self.samples += len(data) // 2

    def commit(self) -> Path:
        """Close and move into place."""
        self._wave.close()
        umask = os.umask(0)
        os.umask(umask)
        self._temp.chmod(0o666 & ~umask)  # mkstemp made it 0600; give it a normal file's mode
        os.replace(self._temp, self.path)
        return self.path

    def abort(self) -> None:
        """Close and delete: no partial file stays behind."""
        try:
            self._wave.close()
        finally:
            self._temp.unlink(missing_ok=True)
