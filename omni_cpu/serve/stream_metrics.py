"""What a listener of `serve`'s streamed speech hears, on /metrics.

The admission middleware hands each streamed PCM or WAV reply's `send` through
`StreamRecorder.wrap`: every body message is one audio chunk, timed from the moment
the request was let in. When the reply ends, the stream's first audio, safe start
(the earliest player start with no gap, omni_cpu.speech.playback) and the silence of
a player that starts at first audio + the play buffer go into vLLM's Prometheus
registry, which `/metrics` serves:

    omni_cpu_stream_first_audio_seconds    histogram
    omni_cpu_stream_safe_start_seconds     histogram
    omni_cpu_stream_stall_seconds          histogram (0 for a stream with no gap)
    omni_cpu_streams_stalled               counter   (streams with a gap)
"""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import Counter, Histogram

from omni_cpu.checkpoint.geometry import SAMPLE_RATE
from omni_cpu.serve.asgi import Message, Send
from omni_cpu.speech.playback import PLAY_BUFFER_MS, StreamTrace

WAV_HEADER_BYTES = 44  # vLLM-Omni's streamed WAV: one RIFF header, then 16-bit PCM
SAMPLE_BYTES = 2  # 16-bit mono
BUCKETS_S = (0.1, 0.2, 0.3, 0.4, 0.6, 0.8, 1.0, 1.5, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0)

FIRST_AUDIO = Histogram(
    "omni_cpu_stream_first_audio_seconds",
    "Streamed speech: request let in to its first audio chunk sent.",
    buckets=BUCKETS_S,
)
SAFE_START = Histogram(
    "omni_cpu_stream_safe_start_seconds",
    "Streamed speech: the earliest moment after the request was let in that a player can "
    "start and never go silent (the largest chunk send time minus the audio before it).",
    buckets=BUCKETS_S,
)
STALL = Histogram(
    "omni_cpu_stream_stall_seconds",
    f"Streamed speech: silence heard by a player that starts at first audio + {PLAY_BUFFER_MS} ms.",
    buckets=(0.0, *BUCKETS_S),
)
STALLED = Counter(
    "omni_cpu_streams_stalled",
    f"Streamed speech replies with a gap for a player starting at first audio + "
    f"{PLAY_BUFFER_MS} ms.",
)


class StreamRecorder:
    """One streamed speech reply, chunk by chunk, observed into the metrics at its end."""

    def __init__(self, sample_rate: int = SAMPLE_RATE, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.started = clock()
        self.sample_rate = sample_rate
        self.trace = StreamTrace()
        self.header_left = 0
        self.audio = False
        self.done = False

    def wrap(self, send: Send) -> Send:
        """`send`, recording the audio it carries."""

        async def send_recorded(message: Message) -> None:
            self.see(message)
            await send(message)

        return send_recorded

    def see(self, message: Message) -> None:
        """Take one ASGI message of the reply."""
        if message["type"] == "http.response.start":
            content_type = dict(message.get("headers") or []).get(b"content-type", b"")
            self.audio = message.get("status") == 200 and content_type.startswith(
                (b"audio/pcm", b"audio/wav")
            )
            self.header_left = WAV_HEADER_BYTES if content_type.startswith(b"audio/wav") else 0
            return
        if message["type"] != "http.response.body" or not self.audio or self.done:
            return
        body = message.get("body", b"")
        skip = min(self.header_left, len(body))
        self.header_left -= skip
        samples = (len(body) - skip) // SAMPLE_BYTES
        if samples:
            # StreamTrace counts 24 kHz samples: a reply resampled to another rate is scaled.
            self.trace.add(self.clock() - self.started, samples * SAMPLE_RATE // self.sample_rate)
        if not message.get("more_body", False):
            self.finish()

    def finish(self) -> None:
        """Observe the stream (once), if it carried audio."""
        if self.done:
            return
        self.done = True
        first = self.trace.ttfa_s
        safe = self.trace.safe_start_s
        if first is None or safe is None:
            return
        run = self.trace.playback(first + PLAY_BUFFER_MS / 1000)
        FIRST_AUDIO.observe(first)
        SAFE_START.observe(safe)
        STALL.observe(run.silence_s)
        if run.gaps:
            STALLED.inc()
