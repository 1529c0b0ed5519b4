"""Long HTTP input spoken as one answer: split into sentences, each part its own request.

The talker's context bounds one request's text (`max_input_chars`), while the
WebSocket path speaks any length by splitting it into sentences. A plain speech
request whose `input` is longer, up to `max_long_input_chars`, is split the same
way (vLLM-Omni's own SpeechTextSplitter, sentence granularity), sentences packed
into parts of at most `max_input_chars`, each part asked of the server in turn as
PCM, and the audio joined, whole frames after whole frames, into one answer in the
requested format: no gap and no second header at the seams. Non-streamed only: a
stream of long text is the WebSocket's.
"""

from __future__ import annotations

import io

# The formats vLLM-Omni 0.30.0 answers, as soundfile writes them (audio_utils_mixin).
FORMATS: dict[str, tuple[str, str, str | None]] = {
    "wav": ("WAV", "audio/wav", "PCM_16"),
    "pcm": ("RAW", "audio/pcm", "PCM_16"),
    "flac": ("FLAC", "audio/flac", None),
    "mp3": ("MP3", "audio/mpeg", None),
    "opus": ("OGG", "audio/ogg", "OPUS"),
}
SAMPLE_RATE = 24_000  # what the server sends when a request names no sample_rate


def sentences(text: str) -> list[str]:
    """`text` in sentences, split as vLLM-Omni's WebSocket path splits it (vllm-omni 0.30.0)."""
    from vllm_omni.entrypoints.openai.speech_text_splitter import SpeechTextSplitter

    splitter = SpeechTextSplitter("sentence")
    return [unit for unit in (*splitter.feed(text), *splitter.flush()) if unit.strip()]


def split_input(text: str, max_chars: int) -> list[str] | None:
    """Consecutive sentences packed into parts of at most `max_chars`; None when a single
    sentence is longer than that (nothing to split it at)."""
    parts: list[str] = []
    current = ""
    for unit in sentences(text):
        unit = unit.strip()
        if len(unit) > max_chars:
            return None
        joined = f"{current} {unit}" if current else unit
        if len(joined) <= max_chars:
            current = joined
        else:
            parts.append(current)
            current = unit
    if current:
        parts.append(current)
    return parts


def encode(pcm: bytes, response_format: str, rate: int) -> tuple[bytes, str]:
    """Joined 16-bit mono PCM as the requested format: (bytes, media type)."""
    import numpy as np
    import soundfile

    file_format, media_type, subtype = FORMATS[response_format]
    if file_format == "RAW":
        return pcm, media_type
    samples = np.frombuffer(pcm, dtype=np.int16)
    buffer = io.BytesIO()
    options = {"subtype": subtype} if subtype else {}
    soundfile.write(buffer, samples, rate, format=file_format, **options)
    return buffer.getvalue(), media_type
