"""A stream of audio chunks as a listener hears it. Pure: no I/O, no clocks.

A player that starts at some moment plays each chunk at that moment plus the
chunk's audio offset (the audio before it), and goes silent whenever a chunk is
not there yet. The *safe start* of a stream is the earliest start with no silence
at all: the largest "arrival - offset" over its chunks. A player that starts at
first audio plus a buffer stalls where a chunk arrives after its playing time;
each stall delays the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omni_cpu.checkpoint.geometry import FRAME_SAMPLES, SAMPLE_RATE

# A chunk later than this at its playing time counts as a gap: below it a player's own
# output period hides the wait (vLLM-Omni's stream client inserts silence from 5 ms).
GAP_TOLERANCE_S = 0.005
# The buffer a player holds before it starts, past first audio, unless told otherwise
# (`bench --play-buffer-ms`): what streaming TTS servers quote their stall rate at.
PLAY_BUFFER_MS = 250


@dataclass(frozen=True)
class Playback:
    """A player's run over one stream: when it started, its gaps and their silence."""

    start_s: float
    gaps: int
    silence_s: float
    chunk_play_s: list[float]  # when each chunk started playing (s since submission)


@dataclass
class StreamTrace:
    """One request's audio as it arrived: seconds since its batch was submitted, samples."""

    chunk_times_s: list[float] = field(default_factory=list)
    chunk_samples: list[int] = field(default_factory=list)

    def add(self, at_s: float, samples: int) -> None:
        self.chunk_times_s.append(at_s)
        self.chunk_samples.append(samples)

    @property
    def samples(self) -> int:
        return sum(self.chunk_samples)

    @property
    def audio_s(self) -> float:
        return self.samples / SAMPLE_RATE

    @property
    def frames(self) -> float:
        return self.samples / FRAME_SAMPLES

    @property
    def ttfa_s(self) -> float | None:
        return self.chunk_times_s[0] if self.chunk_times_s else None

    @property
    def wall_s(self) -> float | None:
        """Submission to the last chunk."""
        return self.chunk_times_s[-1] if self.chunk_times_s else None

    @property
    def rtf(self) -> float | None:
        """This request's wall time per second of its audio (below 1: faster than real time)."""
        if not self.samples or self.wall_s is None:
            return None
        return self.wall_s / self.audio_s

    def offsets_s(self) -> list[float]:
        """Each chunk's audio offset: the seconds of audio before it in the stream."""
        offsets, before = [], 0
        for samples in self.chunk_samples:
            offsets.append(before / SAMPLE_RATE)
            before += samples
        return offsets

    @property
    def safe_start_s(self) -> float | None:
        """The earliest moment (s since submission) a player can start and never go silent."""
        if not self.chunk_times_s:
            return None
        offsets = self.offsets_s()
        return max(at - offset for at, offset in zip(self.chunk_times_s, offsets, strict=True))

    def playback(self, start_s: float) -> Playback:
        """What a player that starts at `start_s` (s since submission) hears."""
        silence, gaps, played = 0.0, 0, []
        for at, offset in zip(self.chunk_times_s, self.offsets_s(), strict=True):
            due = start_s + offset + silence
            if at - due > GAP_TOLERANCE_S:
                gaps += 1
                silence += at - due
            played.append(start_s + offset + silence)
        return Playback(start_s, gaps, silence, played)

    def to_dict(self, play_buffer_ms: float = PLAY_BUFFER_MS) -> dict[str, Any]:
        """Its chunks as [arrival s, audio offset s, audio s], its safe start and its gaps."""
        first = self.ttfa_s
        run = None if first is None else self.playback(first + play_buffer_ms / 1000)
        return {
            "chunks": [
                [round(at, 4), round(offset, 4), round(samples / SAMPLE_RATE, 4)]
                for at, offset, samples in zip(
                    self.chunk_times_s, self.offsets_s(), self.chunk_samples, strict=True
                )
            ],
            "safe_start_s": None if self.safe_start_s is None else round(self.safe_start_s, 3),
            "gaps": None if run is None else run.gaps,
            "stall_s": None if run is None else round(run.silence_s, 3),
        }

    @property
    def cadence_ms_per_frame(self) -> float | None:
        """Milliseconds between chunk arrivals per frame they carried, after the first chunk.

        Each later chunk leaves the talker one chunk's worth of frames after the
        previous one, so while code2wav keeps up this is the talker's time per frame
        for this stream (at concurrency c, one talker step makes a frame for each of
        the c streams). None with fewer than two chunks.
        """
        if len(self.chunk_times_s) < 2:
            return None
        later_frames = sum(self.chunk_samples[1:]) / FRAME_SAMPLES
        if later_frames <= 0:
            return None
        return (self.chunk_times_s[-1] - self.chunk_times_s[0]) * 1000 / later_frames
