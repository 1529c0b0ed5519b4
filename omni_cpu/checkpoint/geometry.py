"""The speech codec's geometry: Qwen3-TTS's 12 Hz tokenizer, one frame of codes per 80 ms.

One home for the frame length: the tokenizer's config states it (`output_sample_rate`,
`decode_upsample_rate`; tests/checkpoint/test_geometry.py holds the two to it), and the
planner (frames per second of real time), speech (samples per frame) and the plots read it
here. Standard library only.
"""

from __future__ import annotations

SAMPLE_RATE = 24_000  # Hz, in and out
FRAME_SAMPLES = 1920  # one 12.5 Hz codec frame at 24 kHz
FRAME_MS = 1000 * FRAME_SAMPLES / SAMPLE_RATE  # 80 ms of audio a frame
