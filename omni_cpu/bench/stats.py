"""Per-stream and per-level numbers from chunk arrival times. Pure: no I/O, no clocks."""

from __future__ import annotations

import math
from collections.abc import Sequence

from omni_cpu.speech.playback import PLAY_BUFFER_MS, StreamTrace


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


def _rounded(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def listener_summary(
    traces: Sequence[StreamTrace], play_buffer_ms: float = PLAY_BUFFER_MS
) -> dict[str, float | int | None]:
    """Safe start percentiles, and the gaps of a player starting at first audio + the buffer."""
    starts = [t.safe_start_s for t in traces if t.safe_start_s is not None]
    runs = [t.playback(t.ttfa_s + play_buffer_ms / 1000) for t in traces if t.ttfa_s is not None]
    waits = [
        t.safe_start_s - t.ttfa_s
        for t in traces
        if t.safe_start_s is not None and t.ttfa_s is not None
    ]
    return {
        "safe_start_p50_s": _rounded(percentile(starts, 50)),
        "safe_start_p95_s": _rounded(percentile(starts, 95)),
        "safe_start_after_first_audio_p95_s": _rounded(percentile(waits, 95)),
        "play_buffer_ms": play_buffer_ms,
        "stalled_streams": sum(1 for run in runs if run.gaps),
        "gaps_p95": _rounded(percentile([run.gaps for run in runs], 95), 1),
        "stall_s_p95": _rounded(percentile([run.silence_s for run in runs], 95)),
    }


def summarize_streams(
    traces: Sequence[StreamTrace], wall_s: float, play_buffer_ms: float = PLAY_BUFFER_MS
) -> dict[str, float | None]:
    """TTFA/RTF/safe start percentiles, stalls, throughput and talker cadence of one level."""
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
        **listener_summary(traces, play_buffer_ms),
    }
