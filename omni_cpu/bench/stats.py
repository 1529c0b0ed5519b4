"""Per-stream and per-level numbers from chunk arrival times. Pure: no I/O, no clocks."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from omni_cpu.speech.codec import FRAME_SAMPLES, SAMPLE_RATE


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100) by linear interpolation between ranks (numpy's default)."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is outside 0-100")
    ordered = sorted(values)
    if not ordered:
        return None
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


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


def _rounded(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def summarize_streams(traces: Sequence[StreamTrace], wall_s: float) -> dict[str, float | None]:
    """TTFA/RTF percentiles, throughput and talker cadence over the streams of one level."""
    ttfas = [t.ttfa_s for t in traces if t.ttfa_s is not None]
    rtfs = [t.rtf for t in traces if t.rtf is not None]
    cadences = [t.cadence_ms_per_frame for t in traces if t.cadence_ms_per_frame is not None]
    audio_s = sum(t.audio_s for t in traces)
    return {
        "requests": len(traces),
        "audio_s": round(audio_s, 3),
        "wall_s": round(wall_s, 3),
        "ttfa_p50_s": _rounded(percentile(ttfas, 50)),
        "ttfa_p95_s": _rounded(percentile(ttfas, 95)),
        "rtf_p50": _rounded(percentile(rtfs, 50)),
        "rtf_p95": _rounded(percentile(rtfs, 95)),
        "audio_s_per_wall_s": _rounded(audio_s / wall_s if wall_s > 0 else None),
        "talker_ms_per_frame": _rounded(percentile(cadences, 50), 1),
        "frames_per_request_p50": _rounded(percentile([t.frames for t in traces], 50), 1),
    }
