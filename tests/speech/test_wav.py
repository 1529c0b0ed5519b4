"""`run`'s 16-bit samples are the ones `serve` sends for the same float audio."""

from __future__ import annotations

import io

import numpy as np
import pytest

from omni_cpu.speech.wav import to_pcm16

soundfile = pytest.importorskip("soundfile")


def served_pcm16(samples: np.ndarray) -> bytes:
    """16-bit PCM as vLLM-Omni's server encodes a reply (soundfile, `PCM_16`)."""
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, 24_000, format="RAW", subtype="PCM_16")
    return buffer.getvalue()


def test_run_writes_the_samples_the_server_sends():
    rng = np.random.default_rng(7)
    # Audio-like values, the exact ends, and values past them (clipped by both).
    samples = np.concatenate(
        [
            rng.uniform(-1.0, 1.0, 48_000),
            rng.normal(0.0, 0.05, 48_000),
            [-1.0, 1.0, 0.0, -0.0, 1.5, -1.5, 1 / 32768, -1 / 32768, 0.5 / 32768],
        ]
    ).astype(np.float32)
    assert to_pcm16(samples) == served_pcm16(samples)
