"""The speech codec's geometry: Qwen3-TTS's 12 Hz tokenizer, one frame of codes per 80 ms.

A leaf: every room that counts samples or frames (request, reference audio, WAV,
bench, check-weights) reads these two numbers from here.
"""

from __future__ import annotations

SAMPLE_RATE = 24_000  # Hz, in and out
FRAME_SAMPLES = 1920  # one 12.5 Hz codec frame at 24 kHz (80 ms)
